#include "kernels.h"

#include "mathfunctions.h"
#include "matmul.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

// Only operations IEEE 754 rounds exactly are used: + - * / and sqrt on float32 (or float64 where
// said), nearbyint, frexp and ldexp. The build keeps the compiler from fusing a * b + c
// (-ffp-contract=off, compute/portable/CMakeLists.txt): every term is rounded twice, everywhere.

namespace tessera::compute::portable {

namespace {

constexpr float Ln2Hi = 0.693145751953125f; // 12 significant bits: k * Ln2Hi is exact for |k| < 2^12
constexpr float Ln2Lo = 1.428606765330187045e-06f;
constexpr float Log2E = 1.44269504088896341f;

} // namespace

float exp(float x)
{
    // x = k ln2 + r, |r| <= ln2 / 2 (Cody and Waite), e^x = 2^k e^r, e^r by its Taylor polynomial
    // of degree 7 (error below 2e-8 relative on that range), in Horner's order.
    return detail::expInline(x);
}

float log(float x)
{
    if (std::isnan(x) || x < 0.0f)
        return std::numeric_limits<float>::quiet_NaN();
    if (x == 0.0f)
        return -std::numeric_limits<float>::infinity();
    if (std::isinf(x))
        return x;
    // x = 2^e m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = f / (2 + f), f = m - 1
    // (exact), by the odd series up to s^9 (|s| < 0.172: the next term is below 3e-10).
    int e = 0;
    float m = std::frexp(x, &e);
    if (m < 0.70710678f) {
        m = m * 2.0f;
        e -= 1;
    }
    const float f = m - 1.0f;
    const float s = f / (2.0f + f);
    const float s2 = s * s;
    float p = 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2;
    const float twoS = 2.0f * s;
    const float logM = twoS + twoS * p;
    const float fe = float(e);
    return fe * Ln2Hi + (fe * Ln2Lo + logM);
}

void linearForward(
    const float* x, const float* w, const float* b, float* y, std::int64_t n, std::int64_t in, std::int64_t out, int threads)
{
    // y = x w^T: B(k, j) = w[j, k].
    matmul(rowMajor(x, in), transposed(w, in), y, out, n, out, in, threads);
    if (b) {
        for (std::int64_t i = 0; i < n; ++i) {
            float* yi = y + i * out;
            for (std::int64_t j = 0; j < out; ++j)
                yi[j] = yi[j] + b[j];
        }
    }
}

void linearGradInput(const float* dy, const float* w, float* dx, std::int64_t n, std::int64_t in, std::int64_t out, int threads)
{
    matmul(rowMajor(dy, out), rowMajor(w, in), dx, in, n, in, out, threads);
}

void linearGradWeight(const float* dy, const float* x, float* dw, std::int64_t n, std::int64_t in, std::int64_t out, int threads)
{
    matmul(transposed(dy, out), rowMajor(x, in), dw, in, out, in, n, threads);
}

void linearGradBias(const float* dy, float* db, std::int64_t n, std::int64_t out)
{
    // Rows in order for each element, the elements side by side.
    std::fill(db, db + out, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
        const float* dyi = dy + i * out;
        for (std::int64_t j = 0; j < out; ++j)
            db[j] = db[j] + dyi[j];
    }
}

void linearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, std::int64_t n,
    std::int64_t in, std::int64_t out, int threads)
{
    if (dx)
        linearGradInput(dy, w, dx, n, in, out, threads);
    if (dw)
        linearGradWeight(dy, x, dw, n, in, out, threads);
    if (db)
        linearGradBias(dy, db, n, out);
}

std::uint64_t splitMix(std::uint64_t seed, std::uint64_t i)
{
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

namespace {

// The top 24 bits of a stream's number over 2^24: uniform in [0, 1), exact in float32.
float unitOf(std::uint64_t z)
{
    return float(z >> 40) / 16777216.0f;
}

// A calling thread's scratch for an unfolded image, kept between calls: a fresh one each step
// would be mapped and faulted in anew (megabytes).
std::vector<float>& scratch(int which, std::size_t size)
{
    thread_local std::vector<float> buffers[2];
    auto& buffer = buffers[which];
    if (buffer.size() < size)
        buffer.resize(size);
    return buffer;
}

// An unfolded image in the thread's scratch.
const float* unfolded3x3(const float* x, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, int threads)
{
    auto& col = scratch(0, std::size_t(n * h * w * c * 9));
    unfold3x3(x, col.data(), n, h, w, c, threads);
    return col.data();
}

} // namespace

void unfold3x3(const float* x, float* col, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, int threads)
{
    const std::int64_t k = c * 9;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (std::int64_t r = 0; r < n * h * w; ++r) {
        const std::int64_t image = r / (h * w), i = (r / w) % h, j = r % w;
        float* row = col + r * k;
        for (std::int64_t ci = 0; ci < c; ++ci) {
            for (std::int64_t ky = 0; ky < 3; ++ky) {
                const std::int64_t y = i + ky - 1;
                for (std::int64_t kx = 0; kx < 3; ++kx) {
                    const std::int64_t xx = j + kx - 1;
                    const bool inside = y >= 0 && y < h && xx >= 0 && xx < w;
                    row[ci * 9 + ky * 3 + kx] = inside ? x[((image * h + y) * w + xx) * c + ci] : 0.0f;
                }
            }
        }
    }
}

void conv3x3Forward(const float* x, const float* w, const float* b, float* y, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads, const float* unfolded)
{
    const float* col = unfolded ? unfolded : unfolded3x3(x, n, h, wd, cin, threads);
    const std::int64_t k = cin * 9, rows = n * h * wd;
    matmul(rowMajor(col, k), transposed(w, k), y, cout, rows, cout, k, threads);
    if (b) {
        for (std::int64_t r = 0; r < rows; ++r) {
            float* yr = y + r * cout;
            for (std::int64_t co = 0; co < cout; ++co)
                yr[co] = yr[co] + b[co];
        }
    }
}

void conv3x3GradWeight(const float* dy, const float* x, float* dw, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads, const float* unfolded)
{
    const float* col = unfolded ? unfolded : unfolded3x3(x, n, h, wd, cin, threads);
    const std::int64_t k = cin * 9;
    // As its transpose, col^T dy, whose sums run over the same pixels in the same order: its
    // columns are the few output channels, which fit a narrow kernel.
    auto& transposedDw = scratch(1, std::size_t(k * cout));
    matmul(transposed(col, k), rowMajor(dy, cout), transposedDw.data(), cout, k, cout, n * h * wd, threads);
    for (std::int64_t co = 0; co < cout; ++co) {
        for (std::int64_t kk = 0; kk < k; ++kk)
            dw[co * k + kk] = transposedDw[std::size_t(kk * cout + co)];
    }
}

void conv3x3GradInput(const float* dy, const float* w, float* dx, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads)
{
    const std::int64_t k = cin * 9, pixels = h * wd;
    auto& dcol = scratch(1, std::size_t(n * pixels * k));
    matmul(rowMajor(dy, cout), rowMajor(w, k), dcol.data(), k, n * pixels, k, cout, threads);
    std::fill(dx, dx + n * pixels * cin, 0.0f);
    // Images apart: each image's pixels take only its own rows, in order.
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t p = 0; p < pixels; ++p) {
            const std::int64_t i = p / wd, j = p % wd;
            const float* row = dcol.data() + (image * pixels + p) * k;
            for (std::int64_t ci = 0; ci < cin; ++ci) {
                for (std::int64_t ky = 0; ky < 3; ++ky) {
                    const std::int64_t y = i + ky - 1;
                    for (std::int64_t kx = 0; kx < 3; ++kx) {
                        const std::int64_t xx = j + kx - 1;
                        if (y < 0 || y >= h || xx < 0 || xx >= wd)
                            continue;
                        float& target = dx[((image * h + y) * wd + xx) * cin + ci];
                        target = target + row[ci * 9 + ky * 3 + kx];
                    }
                }
            }
        }
    }
}

void maxPool2Forward(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c)
{
    const std::int64_t oh = h / 2, ow = w / 2;
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t i = 0; i < oh; ++i) {
            for (std::int64_t j = 0; j < ow; ++j) {
                const float* a = x + ((image * h + 2 * i) * w + 2 * j) * c;
                const float* below = a + w * c;
                float* out = y + ((image * oh + i) * ow + j) * c;
                for (std::int64_t ch = 0; ch < c; ++ch) {
                    float m = a[ch];
                    for (const float v : { a[c + ch], below[ch], below[c + ch] })
                        m = v > m ? v : m;
                    out[ch] = m;
                }
            }
        }
    }
}

void maxPool2Backward(const float* x, const float* dy, float* dx, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c)
{
    const std::int64_t oh = h / 2, ow = w / 2;
    std::fill(dx, dx + n * h * w * c, 0.0f);
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t i = 0; i < oh; ++i) {
            for (std::int64_t j = 0; j < ow; ++j) {
                const std::int64_t base = ((image * h + 2 * i) * w + 2 * j) * c;
                const std::int64_t offsets[4] { 0, c, w * c, w * c + c };
                const float* g = dy + ((image * oh + i) * ow + j) * c;
                for (std::int64_t ch = 0; ch < c; ++ch) {
                    std::int64_t best = base + ch;
                    for (int q = 1; q < 4; ++q) {
                        if (x[base + offsets[q] + ch] > x[best])
                            best = base + offsets[q] + ch;
                    }
                    dx[best] = g[ch];
                }
            }
        }
    }
}

void maxPool2ReluBackward(
    const float* y, const float* dy, float* dx, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c)
{
    const std::int64_t oh = h / 2, ow = w / 2;
    if (oh * 2 != h || ow * 2 != w) // an odd row or column no window covers: its gradient is 0
        std::fill(dx, dx + n * h * w * c, 0.0f);
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t i = 0; i < oh; ++i) {
            for (std::int64_t j = 0; j < ow; ++j) {
                const std::int64_t base = ((image * h + 2 * i) * w + 2 * j) * c;
                const float *y0 = y + base, *y1 = y0 + c, *y2 = y0 + w * c, *y3 = y2 + c;
                float *d0 = dx + base, *d1 = d0 + c, *d2 = d0 + w * c, *d3 = d2 + c;
                const float* g = dy + ((image * oh + i) * ow + j) * c;
                // Without branches (a window's largest is a coin toss for the branch predictor),
                // and every input of the window written once: no pass of zeros first.
#pragma GCC ivdep
                for (std::int64_t ch = 0; ch < c; ++ch) {
                    const float v0 = y0[ch], v1 = y1[ch], v2 = y2[ch], v3 = y3[ch];
                    // The index as a float, so that the compiler keeps all of it in vector lanes.
                    float m = v0, best = 0.0f;
                    const bool b1 = v1 > m;
                    best = b1 ? 1.0f : best;
                    m = b1 ? v1 : m;
                    const bool b2 = v2 > m;
                    best = b2 ? 2.0f : best;
                    m = b2 ? v2 : m;
                    const bool b3 = v3 > m;
                    best = b3 ? 3.0f : best;
                    const float gv = g[ch];
                    const float k0 = v0 > 0.0f ? gv : 0.0f, k1 = v1 > 0.0f ? gv : 0.0f;
                    const float k2 = v2 > 0.0f ? gv : 0.0f, k3 = v3 > 0.0f ? gv : 0.0f;
                    d0[ch] = best == 0.0f ? k0 : 0.0f;
                    d1[ch] = best == 1.0f ? k1 : 0.0f;
                    d2[ch] = best == 2.0f ? k2 : 0.0f;
                    d3[ch] = best == 3.0f ? k3 : 0.0f;
                }
            }
        }
    }
}

void channelsFirst(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c)
{
    const std::int64_t pixels = h * w;
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (std::int64_t ch = 0; ch < c; ++ch)
                y[(image * c + ch) * pixels + p] = x[(image * pixels + p) * c + ch];
        }
    }
}

void channelsLast(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c)
{
    const std::int64_t pixels = h * w;
    for (std::int64_t image = 0; image < n; ++image) {
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (std::int64_t ch = 0; ch < c; ++ch)
                y[(image * pixels + p) * c + ch] = x[(image * c + ch) * pixels + p];
        }
    }
}

namespace {

float dropoutScale(float p)
{
    return float(1.0 / (1.0 - double(p)));
}

} // namespace

void dropoutForward(const float* x, float* y, std::int64_t count, float p, std::uint64_t seed)
{
    const float scale = dropoutScale(p);
    for (std::int64_t i = 0; i < count; ++i)
        y[i] = unitOf(splitMix(seed, std::uint64_t(i))) >= p ? x[i] * scale : 0.0f;
}

void dropoutBackward(const float* dy, float* dx, std::int64_t count, float p, std::uint64_t seed)
{
    dropoutForward(dy, dx, count, p, seed);
}

void embedForward(const std::int64_t* tokens, const float* wte, const float* wpe, float* x, std::int64_t n, std::int64_t length,
    std::int64_t width)
{
    for (std::int64_t row = 0; row < n * length; ++row) {
        const float* token = wte + tokens[row] * width;
        const float* position = wpe + (row % length) * width;
        float* out = x + row * width;
        for (std::int64_t c = 0; c < width; ++c)
            out[c] = token[c] + position[c];
    }
}

void embedGradPosition(const float* dx, float* dwpe, std::int64_t n, std::int64_t length, std::int64_t width)
{
    std::fill(dwpe, dwpe + length * width, 0.0f);
    for (std::int64_t row = 0; row < n * length; ++row) {
        const float* g = dx + row * width;
        float* out = dwpe + (row % length) * width;
        for (std::int64_t c = 0; c < width; ++c)
            out[c] = out[c] + g[c];
    }
}

void embedGradToken(const float* dx, const std::int64_t* tokens, const float* base, float* dwte, std::int64_t vocabulary,
    std::int64_t n, std::int64_t length, std::int64_t width)
{
    if (base)
        std::copy(base, base + vocabulary * width, dwte);
    else
        std::fill(dwte, dwte + vocabulary * width, 0.0f);
    for (std::int64_t row = 0; row < n * length; ++row) {
        const float* g = dx + row * width;
        float* out = dwte + tokens[row] * width;
        for (std::int64_t c = 0; c < width; ++c)
            out[c] = out[c] + g[c];
    }
}

void add(const float* a, const float* b, float* y, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i)
        y[i] = a[i] + b[i];
}

void addScaled(float* y, const float* x, std::int64_t count, float alpha)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const float product = alpha * x[i];
        y[i] = y[i] + product;
    }
}

namespace {

constexpr float LayerNormEps = 1e-5f;

struct RowStatistics {
    float mean;
    float rstd;
};

RowStatistics statisticsOf(const float* x, std::int64_t width)
{
    float sum = 0.0f;
    for (std::int64_t c = 0; c < width; ++c)
        sum = sum + x[c];
    const float mean = sum / float(width);
    float squares = 0.0f;
    for (std::int64_t c = 0; c < width; ++c) {
        const float d = x[c] - mean;
        squares = squares + d * d;
    }
    const float variance = squares / float(width);
    return { mean, 1.0f / std::sqrt(variance + LayerNormEps) };
}

} // namespace

void layerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::int64_t rows, std::int64_t width)
{
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * width;
        float* yr = y + r * width;
        const auto [mean, rstd] = statisticsOf(xr, width);
        for (std::int64_t c = 0; c < width; ++c)
            yr[c] = ((xr[c] - mean) * rstd) * gamma[c] + beta[c];
    }
}

void layerNormBackward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
    std::int64_t rows, std::int64_t width)
{
    std::fill(dgamma, dgamma + width, 0.0f);
    std::fill(dbeta, dbeta + width, 0.0f);
    std::vector<float> xhat(std::size_t(width), 0.0f), g(std::size_t(width), 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * width;
        const float* dyr = dy + r * width;
        const auto [mean, rstd] = statisticsOf(xr, width);
        float sumG = 0.0f, sumGx = 0.0f;
        for (std::int64_t c = 0; c < width; ++c) {
            xhat[std::size_t(c)] = (xr[c] - mean) * rstd;
            g[std::size_t(c)] = dyr[c] * gamma[c];
            sumG = sumG + g[std::size_t(c)];
            sumGx = sumGx + g[std::size_t(c)] * xhat[std::size_t(c)];
            dgamma[c] = dgamma[c] + dyr[c] * xhat[std::size_t(c)];
            dbeta[c] = dbeta[c] + dyr[c];
        }
        const float a = sumG / float(width), b = sumGx / float(width);
        float* dxr = dx + r * width;
        for (std::int64_t c = 0; c < width; ++c)
            dxr[c] = ((g[std::size_t(c)] - a) - xhat[std::size_t(c)] * b) * rstd;
    }
}

float erf(float x)
{
    return detail::erfInline(x);
}

// Elementwise loops with exponentials, also built for AVX2 and AVX-512 (never FMA: neither target
// enables it, and -ffp-contract=off) and picked by the CPU at load time: lanes compute alone, so
// every clone gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__gnu_linux__)
#define TESSERA_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_SIMD_CLONES
#endif

TESSERA_SIMD_CLONES void geluForward(const float* x, float* y, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i)
        y[i] = (0.5f * x[i]) * (1.0f + detail::erfInline(x[i] * 0.70710678f));
}

TESSERA_SIMD_CLONES void geluBackward(const float* x, const float* dy, float* dx, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const float v = x[i];
        const float cdf = 0.5f * (1.0f + detail::erfInline(v * 0.70710678f));
        const float pdf = detail::expInline(-0.5f * (v * v)) * 0.39894228f;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

namespace {

// p for one (n, h) pair into `p` [length, length]: scores, scaled, causal softmax (zeros above
// the diagonal).
void attentionWeights(const float* base, float* p, std::int64_t length, std::int64_t width, std::int64_t head, std::int64_t d)
{
    const std::int64_t stride = 3 * width;
    const float scale = float(1.0 / std::sqrt(double(d)));
    matmul({ base + head * d, stride, 1 }, { base + width + head * d, 1, stride }, p, length, length, length, d, 1);
    for (std::int64_t i = 0; i < length; ++i) {
        float* row = p + i * length;
        for (std::int64_t j = 0; j <= i; ++j)
            row[j] = row[j] * scale;
        float m = row[0];
        for (std::int64_t j = 1; j <= i; ++j)
            m = row[j] > m ? row[j] : m;
        // The exponentials side by side in SIMD lanes, then their sum in order.
        for (std::int64_t j = 0; j <= i; ++j)
            row[j] = detail::expInline(row[j] - m);
        float z = 0.0f;
        for (std::int64_t j = 0; j <= i; ++j)
            z = z + row[j];
        for (std::int64_t j = 0; j <= i; ++j)
            row[j] = row[j] / z;
        for (std::int64_t j = i + 1; j < length; ++j)
            row[j] = 0.0f;
    }
}

} // namespace

void attentionForward(
    const float* qkv, float* y, std::int64_t n, std::int64_t length, std::int64_t heads, std::int64_t width, int threads)
{
    const std::int64_t d = width / heads, stride = 3 * width;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (std::int64_t pair = 0; pair < n * heads; ++pair) {
        const std::int64_t b = pair / heads, head = pair % heads;
        thread_local std::vector<float> p;
        p.resize(std::size_t(length * length));
        const float* base = qkv + b * length * stride;
        attentionWeights(base, p.data(), length, width, head, d);
        matmul({ p.data(), length, 1 }, { base + 2 * width + head * d, stride, 1 }, y + b * length * width + head * d, width,
            length, d, length, 1);
    }
}

void attentionLastRow(const float* qkv, float* y, std::int64_t length, std::int64_t heads, std::int64_t width)
{
    const std::int64_t d = width / heads, stride = 3 * width;
    const float scale = float(1.0 / std::sqrt(double(d)));
    const float* q = qkv + (length - 1) * stride;
    std::vector<float> p(static_cast<std::size_t>(length));
    for (std::int64_t head = 0; head < heads; ++head) {
        for (std::int64_t j = 0; j < length; ++j) {
            const float* k = qkv + j * stride + width + head * d;
            float s = 0.0f;
            for (std::int64_t c = 0; c < d; ++c)
                s = s + q[head * d + c] * k[c];
            p[std::size_t(j)] = s * scale;
        }
        float m = p[0];
        for (std::int64_t j = 1; j < length; ++j)
            m = p[std::size_t(j)] > m ? p[std::size_t(j)] : m;
        for (std::int64_t j = 0; j < length; ++j)
            p[std::size_t(j)] = detail::expInline(p[std::size_t(j)] - m);
        float z = 0.0f;
        for (std::int64_t j = 0; j < length; ++j)
            z = z + p[std::size_t(j)];
        for (std::int64_t j = 0; j < length; ++j)
            p[std::size_t(j)] = p[std::size_t(j)] / z;
        float* out = y + head * d;
        for (std::int64_t c = 0; c < d; ++c) {
            float sum = 0.0f;
            for (std::int64_t j = 0; j < length; ++j)
                sum = sum + p[std::size_t(j)] * qkv[j * stride + 2 * width + head * d + c];
            out[c] = sum;
        }
    }
}

void attentionBackward(const float* qkv, const float* dy, float* dqkv, std::int64_t n, std::int64_t length, std::int64_t heads,
    std::int64_t width, int threads)
{
    const std::int64_t d = width / heads, stride = 3 * width;
    const float scale = float(1.0 / std::sqrt(double(d)));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (std::int64_t pair = 0; pair < n * heads; ++pair) {
        const std::int64_t b = pair / heads, head = pair % heads;
        thread_local std::vector<float> p, ds;
        p.resize(std::size_t(length * length));
        ds.resize(std::size_t(length * length));
        const float* base = qkv + b * length * stride;
        const float* g = dy + b * length * width + head * d;
        float* out = dqkv + b * length * stride;
        attentionWeights(base, p.data(), length, width, head, d);
        matmul({ g, width, 1 }, { base + 2 * width + head * d, 1, stride }, ds.data(), length, length, length, d, 1);
        for (std::int64_t i = 0; i < length; ++i) {
            const float* pi = p.data() + i * length;
            float* di = ds.data() + i * length;
            float r = 0.0f;
            for (std::int64_t j = 0; j < length; ++j)
                r = r + di[j] * pi[j];
            for (std::int64_t j = 0; j < length; ++j)
                di[j] = pi[j] * (di[j] - r);
        }
        float* dq = out + head * d;
        float* dk = out + width + head * d;
        float* dv = out + 2 * width + head * d;
        matmul({ ds.data(), length, 1 }, { base + width + head * d, stride, 1 }, dq, stride, length, d, length, 1);
        matmul({ ds.data(), 1, length }, { base + head * d, stride, 1 }, dk, stride, length, d, length, 1);
        matmul({ p.data(), 1, length }, { g, width, 1 }, dv, stride, length, d, length, 1);
        for (std::int64_t i = 0; i < length; ++i) {
            for (std::int64_t c = 0; c < d; ++c) {
                dq[i * stride + c] = dq[i * stride + c] * scale;
                dk[i * stride + c] = dk[i * stride + c] * scale;
            }
        }
    }
}

void uniformFill(float* values, std::int64_t count, float bound, std::uint64_t seed)
{
    // The stream's numbers in order: splitMix(seed, i) for element i.
    for (std::int64_t i = 0; i < count; ++i)
        values[i] = (2.0f * unitOf(splitMix(seed, std::uint64_t(i))) - 1.0f) * bound;
}

void normalisePixels(const std::uint8_t* raw, float* out, std::int64_t count, float mean, float std)
{
    for (std::int64_t i = 0; i < count; ++i)
        out[i] = (float(raw[i]) / 255.0f - mean) / std;
}

void reluForward(const float* x, float* y, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void reluBackward(const float* y, const float* dy, float* dx, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

float crossEntropy(const float* logits, const std::int64_t* targets, float* dlogits, std::int64_t n, std::int64_t classes)
{
    float total = 0.0f;
    const float inverse = 1.0f / float(n);
    std::vector<float> e(static_cast<std::size_t>(classes));
    for (std::int64_t i = 0; i < n; ++i) {
        const float* z = logits + i * classes;
        float m = z[0];
        for (std::int64_t c = 1; c < classes; ++c)
            m = std::max(m, z[c]);
        for (std::int64_t c = 0; c < classes; ++c) // in SIMD lanes; then the sum in order
            e[std::size_t(c)] = detail::expInline(z[c] - m);
        float s = 0.0f;
        for (std::int64_t c = 0; c < classes; ++c)
            s = s + e[std::size_t(c)];
        const std::int64_t t = targets[i];
        total = total + ((m + portable::log(s)) - z[t]);
        if (dlogits) {
            float* d = dlogits + i * classes;
            for (std::int64_t c = 0; c < classes; ++c)
                d[c] = (e[std::size_t(c)] / s - (c == t ? 1.0f : 0.0f)) * inverse;
        }
    }
    return total / float(n);
}

void softmax(const float* logits, float* p, std::int64_t n, std::int64_t classes)
{
    for (std::int64_t i = 0; i < n; ++i) {
        const float* z = logits + i * classes;
        float* out = p + i * classes;
        float m = z[0];
        for (std::int64_t c = 1; c < classes; ++c)
            m = std::max(m, z[c]);
        for (std::int64_t c = 0; c < classes; ++c)
            out[c] = detail::expInline(z[c] - m);
        float s = 0.0f;
        for (std::int64_t c = 0; c < classes; ++c)
            s = s + out[c];
        for (std::int64_t c = 0; c < classes; ++c)
            out[c] = out[c] / s;
    }
}

void sgdStep(float* p, const float* grad, float* buffer, std::int64_t count, float lr, float momentum, float weightDecay,
    bool nesterov, bool firstStep)
{
    for (std::int64_t i = 0; i < count; ++i) {
        float g = grad[i];
        if (weightDecay != 0.0f)
            g = g + weightDecay * p[i];
        if (momentum != 0.0f) {
            buffer[i] = firstStep ? g : momentum * buffer[i] + g;
            g = nesterov ? g + momentum * buffer[i] : buffer[i];
        }
        p[i] = p[i] + (-lr) * g;
    }
}

double biasCorrection(double beta, std::int64_t step)
{
    double power = 1.0, base = beta;
    for (std::int64_t e = step; e > 0; e >>= 1) {
        if (e & 1)
            power = power * base;
        base = base * base;
    }
    return 1.0 - power;
}

void adamStep(float* p, const float* grad, float* m, float* v, std::int64_t count, double lr, double beta1, double beta2,
    double eps, double weightDecay, bool decoupled, std::int64_t step)
{
    const float b1 = float(beta1), c1 = float(1.0 - beta1);
    const float b2 = float(beta2), c2 = float(1.0 - beta2);
    const float decay = float(1.0 - lr * weightDecay);
    const float wd = float(weightDecay);
    const float stepSize = float(lr / biasCorrection(beta1, step));
    const float root2 = float(std::sqrt(biasCorrection(beta2, step)));
    const float epsilon = float(eps);
    for (std::int64_t i = 0; i < count; ++i) {
        float g = grad[i];
        if (decoupled)
            p[i] = p[i] * decay;
        else if (weightDecay != 0.0)
            g = g + wd * p[i];
        m[i] = b1 * m[i] + c1 * g;
        v[i] = b2 * v[i] + c2 * (g * g);
        const float denominator = std::sqrt(v[i]) / root2 + epsilon;
        p[i] = p[i] + (-stepSize) * (m[i] / denominator);
    }
}

double sumOfSquares(const float* values, std::int64_t count)
{
    double sum = 0.0;
    for (std::int64_t i = 0; i < count; ++i)
        sum = sum + double(values[i]) * double(values[i]);
    return sum;
}

float clipFactor(double sumSquares, double maxNorm)
{
    const double norm = std::sqrt(sumSquares);
    return float(std::min(1.0, maxNorm / (norm + 1e-6)));
}

} // namespace tessera::compute::portable
