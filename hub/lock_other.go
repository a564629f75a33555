//go:build !unix

package hub

import "os"

// tryLock takes no lock where flock does not exist.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) {}
