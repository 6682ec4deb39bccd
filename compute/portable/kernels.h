#pragma once

// Portable kernels: forward and backward of the operators a zoo MLP trains with, and the optimiser
// updates, each with a fixed order of float32 operations that does not depend on the CPU's SIMD
// width or instruction set, the thread count, BLAS or LibTorch, so that every machine computes
// the same bits from the same inputs (docs/DETERMINISM.md, "Portable kernels"). No torch, no libm
// for anything that rounds (own exp and log); built with -ffp-contract=off, so that a multiply and
// an add are two IEEE operations on every compiler and optimisation level.
//
// The rule for every sum: it starts at 0.0f and adds its terms one at a time in index order. Work
// is split across threads only by output element, never within one, so a thread count changes
// who computes an element, not how.
//
// Matrices are row-major float32, contiguous.

#include <cstdint>

namespace tessera::compute::portable {

// y[n, out] = (sum over k of x[n, k] * w[out, k]) + b[out]   (b may be null)
void linearForward(
    const float* x, const float* w, const float* b, float* y, std::int64_t n, std::int64_t in, std::int64_t out, int threads = 1);
// From dy[n, out]: dx[n, in] = sum over j of dy[n, j] * w[j, k] (j in order); dw[out, in] = sum over
// rows i of dy[i, j] * x[i, k] (i in order); db[out] = sum over rows of dy. Any output may be null.
void linearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, std::int64_t n,
    std::int64_t in, std::int64_t out, int threads = 1);

// linearBackward's three parts on their own: dx = dy w, dw = dy^T x, db = the rows of dy summed.
void linearGradInput(
    const float* dy, const float* w, float* dx, std::int64_t n, std::int64_t in, std::int64_t out, int threads = 1);
void linearGradWeight(
    const float* dy, const float* x, float* dw, std::int64_t n, std::int64_t in, std::int64_t out, int threads = 1);
void linearGradBias(const float* dy, float* db, std::int64_t n, std::int64_t out);

// 3x3 convolutions with padding 1 and stride 1 (the zoo cnn's) on images in channels-last layout
// (x[n, i, j, c], h x w pixels), with PyTorch's weight layout w[co, ci, ky, kx] and bias b[co]. The
// image is unfolded into col[(n, i, j), k] with k = (ci, ky, kx) in that order (zero where the
// window leaves the image), and each is a matrix product of matmul.h:
//   forward:  y[(n, i, j), co] = (sum over k of col[(n, i, j), k] * w[co, k]) + b[co]
//   weight:   dw[co, k] = sum over (n, i, j) in order of dy[(n, i, j), co] * col[(n, i, j), k]
//   input:    dcol[(n, i, j), k] = sum over co of dy[(n, i, j), co] * w[co, k], folded back: dx starts
//             at 0 and each dcol element is added to the pixel it came from, output pixels (n, i, j)
//             in order and within each k in order.
// The bias's gradient is linearGradBias over the n h w rows of dy.
// `unfolded` (may be null): x's col, from unfold3x3, which the forward and the weight's gradient
// share (an executor keeps it for the step); null: unfolded here.
void conv3x3Forward(const float* x, const float* w, const float* b, float* y, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads = 1, const float* unfolded = nullptr);
void conv3x3GradWeight(const float* dy, const float* x, float* dw, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads = 1, const float* unfolded = nullptr);
// col (n h w rows of cin x 9) from channels-last x.
void unfold3x3(const float* x, float* col, std::int64_t n, std::int64_t h, std::int64_t wd, std::int64_t cin, int threads = 1);
void conv3x3GradInput(const float* dy, const float* w, float* dx, std::int64_t n, std::int64_t h, std::int64_t wd,
    std::int64_t cin, std::int64_t cout, int threads = 1);

// 2x2 max pooling with stride 2, channels-last (h and w rounded down): each output is the largest
// of its window's four inputs, taken in the order (0, 0), (0, 1), (1, 0), (1, 1) with a strict >,
// so the first of equal ones wins; the gradient goes to that input alone (dx is 0 elsewhere).
void maxPool2Forward(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);
void maxPool2Backward(const float* x, const float* dy, float* dx, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);
// Pooling after a ReLU, its gradient and the ReLU's in one pass: maxPool2Backward's dx from the
// ReLU's output y, then reluBackward's rule on it (the chosen input keeps dy where y > 0).
void maxPool2ReluBackward(
    const float* y, const float* dy, float* dx, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);

// Layout changes (exact copies): channels-last x[n, i, j, c] to channels-first y[n, c, i, j] (a
// flattened feature map in PyTorch's order), and back.
void channelsFirst(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);
void channelsLast(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);

// The i-th number (from 0) of the SplitMix64 stream that starts at `seed`: counter-based, so any
// element of a stream is drawn without the ones before it.
std::uint64_t splitMix(std::uint64_t seed, std::uint64_t i);
// Inverted dropout with rate p from stream `seed`: element i is kept when u >= p, u = the top 24
// bits of splitMix(seed, i) over 2^24 (exact); kept ones are scaled by float(1 / (1 - p)) (the
// quotient in float64, rounded once), dropped ones are 0. The gradient passes the same mask.
void dropoutForward(const float* x, float* y, std::int64_t count, float p, std::uint64_t seed);
void dropoutBackward(const float* dy, float* dx, std::int64_t count, float p, std::uint64_t seed);

// The gpt's (docs/JOBS.md, "The zoo"; docs/DETERMINISM.md, "Portable mode").
//
// Token and position embedding: x[n, t, :] = wte[tokens[n, t], :] + wpe[t, :]. Their gradients:
// dwpe[t, :] = the sum over n in order of dx[n, t, :]; dwte starts as `base` (the tied head's
// gradient; null: zeros) and dx[n, t, :] is added to row tokens[n, t], positions (n, t) in order.
void embedForward(const std::int64_t* tokens, const float* wte, const float* wpe, float* x, std::int64_t n, std::int64_t length,
    std::int64_t width);
void embedGradPosition(const float* dx, float* dwpe, std::int64_t n, std::int64_t length, std::int64_t width);
void embedGradToken(const float* dx, const std::int64_t* tokens, const float* base, float* dwte, std::int64_t vocabulary,
    std::int64_t n, std::int64_t length, std::int64_t width);

// y = a + b, element by element.
void add(const float* a, const float* b, float* y, std::int64_t count);
// y = y + alpha * x, element by element, in two roundings (the product, then the sum) on every CPU:
// a round's aggregation (docs/DETERMINISM.md, "Round weights"), where LibTorch's add with alpha
// fuses them into one on CPUs with FMA and not on others.
void addScaled(float* y, const float* x, std::int64_t count, float alpha);

// LayerNorm over the last dimension (eps 1e-5), per row of `width`: mean = (sum of x in order) /
// width; var = (sum of (x - mean)^2 in order) / width; rstd = 1 / sqrt(var + eps);
// y = ((x - mean) * rstd) * gamma + beta. Its gradient, with xhat = (x - mean) * rstd recomputed
// from x: g = dy * gamma; a = (sum of g in order) / width; b = (sum of g * xhat in order) / width;
// dx = ((g - a) - xhat * b) * rstd; dgamma = the sum over rows in order of dy * xhat; dbeta = the
// sum over rows in order of dy.
void layerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::int64_t rows, std::int64_t width);
void layerNormBackward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
    std::int64_t rows, std::int64_t width);

// erf in float32 (Abramowitz and Stegun 7.1.26, absolute error below 2e-7): for x >= 0,
// t = 1 / (1 + 0.3275911 x), erf = 1 - (((((1.061405429 t - 1.453152027) t + 1.421413741) t -
// 0.284496736) t + 0.254829592) t) exp(-x x); erf(-x) = -erf(x).
float erf(float x);
// Exact GELU: y = (0.5 * x) * (1 + erf(x * 0.70710678)); its gradient
// dx = dy * ((0.5 * (1 + erf(x * 0.70710678))) + x * (exp(-0.5 * (x * x)) * 0.39894228)).
void geluForward(const float* x, float* y, std::int64_t count);
void geluBackward(const float* x, const float* dy, float* dx, std::int64_t count);

// Causal self-attention of `heads` heads from qkv [n, length, 3 width] (q, k, v side by side,
// head h at columns h d .. (h + 1) d - 1 of each, d = width / heads) to y [n, length, width]
// (heads side by side), scale = float(1 / sqrt(double(d))). Per (n, h): s = matmul(q, k^T) then
// s = s * scale; row i keeps j <= i: m = the largest, e = exp(s - m), z = the sum of e in order,
// p = e / z, and p = 0 for j > i; y = matmul(p, v) (all j: the zeros add nothing). Its gradient,
// from dy and p recomputed: dp = matmul(dy, v^T); r = the sum over j in order of dp * p per row;
// ds = p * (dp - r); dq = matmul(ds, k) then * scale; dk = matmul(ds^T, q) then * scale;
// dv = matmul(p^T, dy). Threads split the (n, h) pairs.
void attentionForward(
    const float* qkv, float* y, std::int64_t n, std::int64_t length, std::int64_t heads, std::int64_t width, int threads = 1);
void attentionBackward(const float* qkv, const float* dy, float* dqkv, std::int64_t n, std::int64_t length, std::int64_t heads,
    std::int64_t width, int threads = 1);

// attentionForward's last row alone, for one sequence (n = 1): y [width] from qkv [length, 3 width]
// (every position's, as kept by an incremental decoder). Per head: s_j = (the sum over c in order
// of q[c] * k_j[c]) * scale for j < length, then m, e, z and p as above, and y[c] = the sum over j
// in order of p_j * v_j[c]: the bits of attentionForward's row length - 1.
void attentionLastRow(const float* qkv, float* y, std::int64_t length, std::int64_t heads, std::int64_t width);

// A layer's first weights: values[i] = (2u - 1) * bound with u = the top 24 bits of the i-th
// number of a SplitMix64 stream from `seed`, over 2^24 (exact): uniform in [-bound, bound).
void uniformFill(float* values, std::int64_t count, float bound, std::uint64_t seed);

// Pixels to inputs: out = (float(raw) / 255 - mean) / std, element by element.
void normalisePixels(const std::uint8_t* raw, float* out, std::int64_t count, float mean, float std);

void reluForward(const float* x, float* y, std::int64_t count);
// dx = dy where the forward output y was above 0, else 0.
void reluBackward(const float* y, const float* dy, float* dx, std::int64_t count);

// Mean cross-entropy of logits[n, classes] against targets[n]: per row, m = max, s = sum of
// exp(z - m) in class order, loss_i = m + log(s) - z_target; the mean is the in-order sum of loss_i
// over n. dlogits (may be null) = (exp(z - m) / s - onehot) / n.
float crossEntropy(const float* logits, const std::int64_t* targets, float* dlogits, std::int64_t n, std::int64_t classes);

// Softmax per row of logits[n, classes], as crossEntropy's: m = the largest, e = exp(z - m),
// s = the sum of e in class order, p = e / s.
void softmax(const float* logits, float* p, std::int64_t n, std::int64_t classes);

// exp and log in float32 from range reduction and fixed polynomials (no libm), within 2 ulp of
// the correctly rounded result over the range training meets; the same bits everywhere.
float exp(float x);
float log(float x);

// Optimiser updates on one parameter tensor of `count` elements, element by element, exactly the
// arithmetic of torch.optim's single-tensor paths written out in float32:
//   SGD: g = grad + wd * p; buf = momentum * buf + g (buf = g at step 1); g = nesterov ? g + momentum
//   * buf : buf; p = p - lr * g.
void sgdStep(float* p, const float* grad, float* buffer, std::int64_t count, float lr, float momentum, float weightDecay,
    bool nesterov, bool firstStep);
//   Adam(W): (AdamW: p = p * (1 - lr * wd); Adam: g = grad + wd * p); m = beta1 * m + (1 - beta1) * g;
//   v = beta2 * v + (1 - beta2) * g * g; p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with
//   bc = 1 - beta^step computed in float64 by repeated squaring (not pow).
void adamStep(float* p, const float* grad, float* m, float* v, std::int64_t count, double lr, double beta1, double beta2,
    double eps, double weightDecay, bool decoupled, std::int64_t step);
double biasCorrection(double beta, std::int64_t step);

// The global L2 norm of several gradients (clip_grad_norm_): the sum of squares in float64 over
// tensors in order and elements in order, its square root; and the factor min(1, max / (norm + 1e-6)).
double sumOfSquares(const float* values, std::int64_t count);
float clipFactor(double sumSquares, double maxNorm);

} // namespace tessera::compute::portable
