package serve

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// CheckOrigin accepts "*" or an origin as browsers send it: a scheme and
// a host (and port), nothing after.
func CheckOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("CORS origin %q: want * or a scheme and host as a browser sends it (https://app.example.com, http://localhost:3000)", o)
	}
	return nil
}

// cors answers browsers' cross-origin requests from the allowed origins:
// a preflight (OPTIONS with Access-Control-Request-Method) gets 204 with
// the methods and the headers it asked for, before any key is checked
// (browsers send none with it); other requests carry
// Access-Control-Allow-Origin. Without allowed origins it adds nothing,
// and a preflight is refused with 403 like one from an origin not
// allowed.
func (s *Server) cors(h http.Handler) http.Handler {
	anyOrigin := slices.Contains(s.opts.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if origin == "" && !preflight {
			h.ServeHTTP(w, r)
			return
		}
		allowed := origin != "" && (anyOrigin || slices.Contains(s.opts.CORSOrigins, origin))
		if allowed {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
			w.Header().Set("Access-Control-Expose-Headers", "X-Request-Id")
		}
		if !preflight {
			h.ServeHTTP(w, r)
			return
		}
		if !allowed {
			writeError(w, &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "origin_not_allowed",
				Message: fmt.Sprintf("origin %q may not call this server from a browser (its CORS origins: %s)", origin, originList(s.opts.CORSOrigins))})
			return
		}
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		if hs := r.Header.Get("Access-Control-Request-Headers"); hs != "" {
			w.Header().Set("Access-Control-Allow-Headers", hs)
		}
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}

func originList(origins []string) string {
	if len(origins) == 0 {
		return "none"
	}
	return strings.Join(origins, ", ")
}
