#include "kernels.h"

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
    if (std::isnan(x))
        return x;
    if (x > 88.72283f)
        return std::numeric_limits<float>::infinity();
    if (x < -103.97208f)
        return 0.0f;
    // x = k ln2 + r, |r| <= ln2 / 2 (Cody and Waite), e^x = 2^k e^r, e^r by its Taylor polynomial
    // of degree 7 (error below 2e-8 relative on that range), in Horner's order.
    const float k = std::nearbyint(x * Log2E);
    float r = x - k * Ln2Hi;
    r = r - k * Ln2Lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return std::ldexp(p, int(k));
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

void uniformFill(float* values, std::int64_t count, float bound, std::uint64_t seed)
{
    std::uint64_t state = seed;
    for (std::int64_t i = 0; i < count; ++i) {
        state += 0x9E3779B97F4A7C15ULL;
        std::uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        const float u = float(z >> 40) / 16777216.0f;
        values[i] = (2.0f * u - 1.0f) * bound;
    }
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
        float s = 0.0f;
        for (std::int64_t c = 0; c < classes; ++c) {
            e[std::size_t(c)] = portable::exp(z[c] - m);
            s = s + e[std::size_t(c)];
        }
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
