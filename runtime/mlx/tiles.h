// Products of many rows of x by a weight matrix on the CPU's tile unit
// (Intel AMX, bfloat16 tiles with float32 sums), where the CPU and the
// operating system run it. W is decoded to float32 as the panels read it,
// then each value is carried as bfloat16 parts: one part (x and W rounded
// to bfloat16 once), two (x as a bfloat16 pair, hi + lo, which holds 16
// bits of its mantissa, against W rounded once) or three (both as pairs,
// the lo x lo product left out). The parts sit side by side along k, so a
// product of T parts is one tile product of T times the depth.
#ifndef ARCHGEN_MLX_TILES_H
#define ARCHGEN_MLX_TILES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace archgen {

// Whether this CPU runs AMX tiles with bfloat16 products and the operating
// system lets this process use them (asked once, for the whole process).
bool cpu_has_amx_bf16();

// Rows of x packed as the tile products read them: for each 16 rows, each
// step of 32 values along k, x's parts (hi, then lo where there are two or
// three terms) as tiles of 16 rows by 32 bfloat16.
struct XTiles {
  std::vector<uint16_t> v;
  int M = 0;      // rows of x
  int K = 0;      // values a row
  int terms = 1;  // parts a product, 1 to 3
  int steps = 0;  // steps of 32 along k (zeros past K)
  int tiles() const { return (M + 15) / 16; }
  int parts() const { return terms == 1 ? 1 : 2; }
};

// Sizes out for M rows of K values in products of terms parts (the rows
// past M in the last tile are zeros).
void tiles_shape_x(int M, int K, int terms, XTiles& out);

// Packs rows [m_lo, m_hi) of x (float32 rows, a row every ldx values) into
// out, sized by tiles_shape_x.
void tiles_pack_x(const float* x, size_t ldx, int m_lo, int m_hi, XTiles& out);

// Packs 16 rows of W (rows[r] holds K float32 values) for products of
// terms parts into dst (tiles_w_size(K, terms) values): for each step of
// 32 along k, W's parts (hi, then lo for three terms) as tiles of 16 pairs
// of k by the 16 rows (a pair of bfloat16 to each 32-bit entry).
void tiles_pack_w(const float* const* rows, int K, int terms, uint16_t* dst);

// The values tiles_pack_w writes for 16 rows of W.
size_t tiles_w_size(int K, int terms);

// c[m * ldc + r] = the product of row m of x by row r of W for every row
// of x (c has room for x.tiles() * 16 rows: rows past M are written too)
// and the 16 * wt rows of W whose packs lie one after another at w.
void tiles_sweep(const XTiles& x, const uint16_t* w, int wt, float* c, size_t ldc);

// Rows of W packed at a time by tiles_products: 256 rows of a 2048-wide W
// in one part take 1 MiB, which stays in the core's L2 cache while every
// pair of x's tiles passes over it.
constexpr int kTileRowsOfW = 256;

// The products of every row of x (packed in xt) by rows [n_lo, n_hi) of W,
// kTileRowsOfW rows of W at a time: row(n, buf) gives row n of W as
// float32 (decoded into buf, room for K values, or where it lies in place),
// the rows are packed in xt's parts and swept, and put(c, ldc, n0, nb)
// takes the results, c[m * ldc + r] for row n0 + r of W (r < nb) and every
// row m of x.
template <typename Row, typename Put>
void tiles_products(const XTiles& xt, int n_lo, int n_hi, Row row, Put put) {
  const size_t K = static_cast<size_t>(xt.K);
  const size_t wsz = tiles_w_size(xt.K, xt.terms);
  thread_local std::vector<float> buf, zeros, c;
  thread_local std::vector<uint16_t> packed;
  buf.resize(16 * K);
  zeros.assign(K, 0.0f);
  c.resize(static_cast<size_t>(xt.tiles()) * 16 * kTileRowsOfW);
  packed.resize(kTileRowsOfW / 16 * wsz);
  const float* rows[16];
  for (int n0 = n_lo; n0 < n_hi; n0 += kTileRowsOfW) {
    const int nb = std::min(kTileRowsOfW, n_hi - n0), wt = (nb + 15) / 16;
    for (int t = 0; t < wt; t++) {
      for (int r = 0; r < 16; r++) {
        const int i = t * 16 + r;
        rows[r] = i < nb ? row(n0 + i, buf.data() + r * K) : zeros.data();
      }
      tiles_pack_w(rows, xt.K, xt.terms, packed.data() + t * wsz);
    }
    tiles_sweep(xt, packed.data(), wt, c.data(), kTileRowsOfW);
    put(static_cast<const float*>(c.data()), static_cast<size_t>(kTileRowsOfW), n0, nb);
  }
}

}  // namespace archgen

#endif
