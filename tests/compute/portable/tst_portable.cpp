// The portable kernels compute what they say (against float64 references), the same bits for any
// thread count, and, for a small training run of every kernel, the bits recorded below: the same
// on every CPU and at every optimisation level this test is built with (tst_portable at the
// build's, tst_portable_o0 at -O0).
#include "portabletraining.h"

#include <compute/portable/kernels.h>
#include <compute/portable/matmul.h>
#include <compute/portable/zoo.h>

#include <QCryptographicHash>
#include <QTest>

#include <cmath>
#include <cstring>
#include <vector>

using namespace tessera::compute;
using portable::testing::Stream;
using portable::testing::train;

namespace {

QByteArray digestOf(const std::vector<std::vector<float>>& tensors)
{
    QCryptographicHash hash(QCryptographicHash::Sha256);
    for (const auto& t : tensors)
        hash.addData(QByteArrayView(reinterpret_cast<const char*>(t.data()), qsizetype(t.size() * sizeof(float))));
    return hash.result().toHex();
}

} // namespace

class PortableTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void expAndLogAreWithinTwoUlps()
    {
        auto ulps = [](float got, double want) {
            const double ulp = std::nextafter(float(want), INFINITY) - float(want);
            return std::fabs(double(got) - want) / ulp;
        };
        double worstExp = 0.0, worstLog = 0.0;
        for (float x = -87.0f; x < 88.0f; x += 0.01371f)
            worstExp = std::max(worstExp, ulps(portable::exp(x), std::exp(double(x))));
        for (float x = 1e-30f; x < 1e30f; x *= 1.0137f)
            worstLog = std::max(worstLog, ulps(portable::log(x), std::log(double(x))));
        QVERIFY2(worstExp <= 2.0, qPrintable(QString::number(worstExp)));
        QVERIFY2(worstLog <= 2.0, qPrintable(QString::number(worstLog)));
        QCOMPARE(portable::exp(0.0f), 1.0f);
        QCOMPARE(portable::log(1.0f), 0.0f);
        QCOMPARE(portable::exp(-200.0f), 0.0f);
        QVERIFY(std::isinf(portable::exp(100.0f)));
        QVERIFY(std::isnan(portable::log(-1.0f)));
    }

    void linearLayersMatchAFloat64Reference()
    {
        constexpr std::int64_t N = 5, In = 37, Out = 11;
        Stream s(3);
        const auto x = s.take(N * In), w = s.take(Out * In), b = s.take(Out), dy = s.take(N * Out);
        std::vector<float> y(N * Out), dx(N * In), dw(Out * In), db(Out);
        portable::linearForward(x.data(), w.data(), b.data(), y.data(), N, In, Out);
        portable::linearBackward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), N, In, Out);
        for (std::int64_t i = 0; i < N; ++i) {
            for (std::int64_t j = 0; j < Out; ++j) {
                double want = b[j];
                for (std::int64_t k = 0; k < In; ++k)
                    want += double(x[i * In + k]) * w[j * In + k];
                QVERIFY(std::fabs(y[i * Out + j] - want) < 1e-5);
            }
            for (std::int64_t k = 0; k < In; ++k) {
                double want = 0.0;
                for (std::int64_t j = 0; j < Out; ++j)
                    want += double(dy[i * Out + j]) * w[j * In + k];
                QVERIFY(std::fabs(dx[i * In + k] - want) < 1e-5);
            }
        }
        for (std::int64_t j = 0; j < Out; ++j) {
            double bias = 0.0;
            for (std::int64_t i = 0; i < N; ++i)
                bias += dy[i * Out + j];
            QVERIFY(std::fabs(db[j] - bias) < 1e-5);
            for (std::int64_t k = 0; k < In; ++k) {
                double want = 0.0;
                for (std::int64_t i = 0; i < N; ++i)
                    want += double(dy[i * Out + j]) * x[i * In + k];
                QVERIFY(std::fabs(dw[j * In + k] - want) < 1e-5);
            }
        }
    }

    void crossEntropyAndItsGradientMatchAFloat64Reference()
    {
        constexpr std::int64_t N = 6, C = 9;
        Stream s(5);
        const auto z = s.take(N * C, 4.0f);
        const std::vector<std::int64_t> t { 0, 8, 3, 3, 5, 1 };
        std::vector<float> d(N * C);
        const float loss = portable::crossEntropy(z.data(), t.data(), d.data(), N, C);
        double want = 0.0;
        for (std::int64_t i = 0; i < N; ++i) {
            double sum = 0.0;
            for (std::int64_t c = 0; c < C; ++c)
                sum += std::exp(double(z[i * C + c]));
            want += std::log(sum) - z[i * C + t[i]];
            for (std::int64_t c = 0; c < C; ++c) {
                const double g = (std::exp(double(z[i * C + c])) / sum - (c == t[i] ? 1.0 : 0.0)) / N;
                QVERIFY(std::fabs(d[i * C + c] - g) < 1e-6);
            }
        }
        QVERIFY2(std::fabs(loss - want / N) < 1e-5, qPrintable(QStringLiteral("%1 %2").arg(loss).arg(want / N)));
    }

    // Every SIMD kernel this CPU can run, at any thread count, computes the bits of the plain
    // triple loop (matmulReference), on shapes that cross every block edge and with strided views.
    void everyMatmulKernelGivesTheReferenceBits()
    {
        struct Shape {
            std::int64_t m, n, k;
        };
        // Narrow products (16 columns or fewer) run another kernel shape: some here too.
        const Shape shapes[] { { 1, 1, 1 }, { 7, 5, 3 }, { 64, 256, 784 }, { 33, 529, 300 }, { 130, 17, 513 }, { 300, 70, 64 },
            { 500, 16, 9 }, { 9, 16, 700 }, { 40, 8, 300 } };
        Stream s(21);
        QStringList ran;
        for (const auto isa : { portable::Isa::Generic, portable::Isa::Avx2, portable::Isa::Avx512 }) {
            if (!portable::forceIsa(isa))
                continue;
            ran << QString::fromLatin1(portable::isaName(isa));
            for (const auto& shape : shapes) {
                const auto a = s.take(std::size_t(shape.m * shape.k)), b = s.take(std::size_t(shape.k * shape.n));
                for (const bool transposeA : { false, true }) {
                    for (const bool transposeB : { false, true }) {
                        const auto viewA
                            = transposeA ? portable::transposed(a.data(), shape.m) : portable::rowMajor(a.data(), shape.k);
                        const auto viewB
                            = transposeB ? portable::transposed(b.data(), shape.k) : portable::rowMajor(b.data(), shape.n);
                        std::vector<float> want(std::size_t(shape.m * shape.n));
                        portable::matmulReference(viewA, viewB, want.data(), shape.n, shape.m, shape.n, shape.k);
                        for (const int threads : { 1, 2, 3 }) {
                            std::vector<float> got(want.size(), -1.0f);
                            portable::matmul(viewA, viewB, got.data(), shape.n, shape.m, shape.n, shape.k, threads);
                            QVERIFY2(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0,
                                qPrintable(QStringLiteral("%1: %2 x %3 x %4, threads %5")
                                               .arg(QString::fromLatin1(portable::isaName(isa)))
                                               .arg(shape.m)
                                               .arg(shape.n)
                                               .arg(shape.k)
                                               .arg(threads)));
                        }
                    }
                }
            }
        }
        portable::forceIsa(portable::Isa::Auto);
        qInfo("matmul kernels checked: %s", qPrintable(ran.join(QStringLiteral(", "))));
        QVERIFY(ran.contains(QStringLiteral("generic")));
    }

    // The recorded training run, once with each kernel this CPU can run.
    void everyKernelEndsTheTrainingRunOnTheRecordedBits()
    {
        for (const auto isa : { portable::Isa::Generic, portable::Isa::Avx2, portable::Isa::Avx512 }) {
            if (!portable::forceIsa(isa))
                continue;
            QCOMPARE(digestOf(train(1)), QByteArray(RecordedDigest));
        }
        portable::forceIsa(portable::Isa::Auto);
    }

    // The cnn's 3x3 convolution on channels-last images with PyTorch's weight layout, its two
    // gradients, max pooling (the first of equal maxima takes the gradient), the layout changes and
    // dropout, against float64 references and by hand.
    void theCnnKernelsComputeWhatTheySay()
    {
        constexpr std::int64_t N = 2, H = 5, W = 4, Ci = 3, Co = 4;
        Stream s(13);
        const auto x = s.take(N * H * W * Ci), w = s.take(Co * Ci * 9), b = s.take(Co), dy = s.take(N * H * W * Co);
        std::vector<float> y(N * H * W * Co), dw(Co * Ci * 9), dx(N * H * W * Ci);
        portable::conv3x3Forward(x.data(), w.data(), b.data(), y.data(), N, H, W, Ci, Co, 2);
        portable::conv3x3GradWeight(dy.data(), x.data(), dw.data(), N, H, W, Ci, Co, 2);
        portable::conv3x3GradInput(dy.data(), w.data(), dx.data(), N, H, W, Ci, Co, 2);
        auto at = [&](const std::vector<float>& t, std::int64_t n, std::int64_t i, std::int64_t j, std::int64_t c,
                      std::int64_t channels) {
            return (i < 0 || i >= H || j < 0 || j >= W) ? 0.0 : double(t[std::size_t(((n * H + i) * W + j) * channels + c)]);
        };
        std::vector<double> wantDw(dw.size()), wantDx(dx.size());
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t i = 0; i < H; ++i)
                for (std::int64_t j = 0; j < W; ++j)
                    for (std::int64_t co = 0; co < Co; ++co) {
                        double want = b[std::size_t(co)];
                        const double g = at(dy, n, i, j, co, Co);
                        for (std::int64_t ci = 0; ci < Ci; ++ci)
                            for (std::int64_t ky = 0; ky < 3; ++ky)
                                for (std::int64_t kx = 0; kx < 3; ++kx) {
                                    const auto k = std::size_t(((co * Ci + ci) * 3 + ky) * 3 + kx);
                                    want += at(x, n, i + ky - 1, j + kx - 1, ci, Ci) * w[k];
                                    wantDw[k] += g * at(x, n, i + ky - 1, j + kx - 1, ci, Ci);
                                    const std::int64_t yy = i + ky - 1, xx = j + kx - 1;
                                    if (yy >= 0 && yy < H && xx >= 0 && xx < W)
                                        wantDx[std::size_t(((n * H + yy) * W + xx) * Ci + ci)] += g * w[k];
                                }
                        QVERIFY(std::fabs(at(y, n, i, j, co, Co) - want) < 1e-5);
                    }
        for (std::size_t k = 0; k < dw.size(); ++k)
            QVERIFY(std::fabs(dw[k] - wantDw[k]) < 1e-5);
        for (std::size_t k = 0; k < dx.size(); ++k)
            QVERIFY(std::fabs(dx[k] - wantDx[k]) < 1e-5);

        // One 4 x 4 image, one channel: windows of 1 2 / 5 6, a tie 3 3 / 3 0 (the first wins), ...
        const std::vector<float> image { 1, 2, 3, 3, 5, 6, 3, 0, -1, -2, 0, 0, -3, -4, 0, 7 };
        std::vector<float> pooled(4), grad(16);
        portable::maxPool2Forward(image.data(), pooled.data(), 1, 4, 4, 1);
        QCOMPARE(pooled, std::vector<float>({ 6, 3, -1, 7 }));
        portable::maxPool2Backward(image.data(), std::vector<float> { 10, 20, 30, 40 }.data(), grad.data(), 1, 4, 4, 1);
        QCOMPARE(grad, std::vector<float>({ 0, 0, 20, 0, 0, 10, 0, 0, 30, 0, 0, 0, 0, 0, 0, 40 }));
        // After a ReLU: the same, and 0 where the chosen input is not above 0 (the -1 window).
        portable::maxPool2ReluBackward(image.data(), std::vector<float> { 10, 20, 30, 40 }.data(), grad.data(), 1, 4, 4, 1);
        QCOMPARE(grad, std::vector<float>({ 0, 0, 20, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 40 }));

        std::vector<float> first(x.size()), back(x.size());
        portable::channelsFirst(x.data(), first.data(), N, H, W, Ci);
        QCOMPARE(first[std::size_t((1 * Ci + 2) * H * W + 3 * W + 1)], x[std::size_t(((1 * H + 3) * W + 1) * Ci + 2)]);
        portable::channelsLast(first.data(), back.data(), N, H, W, Ci);
        QCOMPARE(back, x);

        constexpr std::int64_t Count = 20000;
        const std::vector<float> ones(Count, 1.0f);
        std::vector<float> dropped(Count), passed(Count);
        portable::dropoutForward(ones.data(), dropped.data(), Count, 0.25f, 99);
        portable::dropoutBackward(ones.data(), passed.data(), Count, 0.25f, 99);
        QCOMPARE(passed, dropped); // the same mask
        std::int64_t kept = 0;
        for (float v : dropped) {
            QVERIFY(v == 0.0f || v == float(1.0 / 0.75));
            kept += v != 0.0f;
        }
        QVERIFY2(std::abs(double(kept) / Count - 0.75) < 0.02, qPrintable(QString::number(kept)));
        portable::dropoutForward(ones.data(), passed.data(), Count, 0.25f, 100);
        QVERIFY(passed != dropped); // another stream, another mask
    }

    // The order of a step's instructions is part of the contract (docs/DETERMINISM.md, "Programs"):
    // a dispute names an instruction by its number. The mlp's, with clipping and SGD's buffers born
    // in the step, as the docs list it.
    void theMlpProgramIsTheDocumentedOrder()
    {
        portable::OptimizerSettings sgd;
        sgd.momentum = 0.9;
        sgd.clipNorm = 1.0;
        const auto program = portable::mlpStep(2, 4, { 3 }, 2, 0.0, sgd, { 0.05, false, 0 });
        const std::string listing = program.listing();
        qInfo("%s", listing.c_str());
        QCOMPARE(QString::fromStdString(listing),
            QStringLiteral(R"(0  Batch  batch.x [2, 4], batch.y [2] int64 <-   # the step's samples and targets
1  Linear  fc0.out [2, 3] <- batch.x, model/fc0.weight, model/fc0.bias  # fc0: forward
2  Relu  fc0.relu [2, 3] <- fc0.out  # fc0: ReLU
3  Linear  fc1.out [2, 2] <- fc0.relu, model/fc1.weight, model/fc1.bias  # fc1: forward
4  CrossEntropy  loss [], fc1.out.grad [2, 2] <- fc1.out, batch.y  # mean cross-entropy and its gradient
5  LinearGradWeight  fc1.weight.grad [2, 3] <- fc1.out.grad, fc0.relu  # fc1: gradient of the weight
6  LinearGradBias  fc1.bias.grad [2] <- fc1.out.grad  # fc1: gradient of the bias
7  LinearGradInput  fc0.relu.grad [2, 3] <- fc1.out.grad, model/fc1.weight  # fc1: gradient of its input
8  ReluGrad  fc0.out.grad [2, 3] <- fc0.relu, fc0.relu.grad  # fc0: ReLU's gradient
9  LinearGradWeight  fc0.weight.grad [3, 4] <- fc0.out.grad, batch.x  # fc0: gradient of the weight
10  LinearGradBias  fc0.bias.grad [3] <- fc0.out.grad  # fc0: gradient of the bias
11  ClipFactor  clip.factor [] <- fc0.bias.grad, fc0.weight.grad, fc1.bias.grad, fc1.weight.grad  (1)  # the gradients' global norm, clipped
12  Scale  fc0.bias.grad.clipped [3] <- fc0.bias.grad, clip.factor  # fc0.bias: gradient clipped
13  Scale  fc0.weight.grad.clipped [3, 4] <- fc0.weight.grad, clip.factor  # fc0.weight: gradient clipped
14  Scale  fc1.bias.grad.clipped [2] <- fc1.bias.grad, clip.factor  # fc1.bias: gradient clipped
15  Scale  fc1.weight.grad.clipped [2, 3] <- fc1.weight.grad, clip.factor  # fc1.weight: gradient clipped
16  Sgd  model/fc0.bias [3], optimizer/momentum/fc0.bias [3] <- model/fc0.bias, fc0.bias.grad.clipped  (0.05, 0.9, 0, 0, 1)  # fc0.bias: SGD update
17  Sgd  model/fc0.weight [3, 4], optimizer/momentum/fc0.weight [3, 4] <- model/fc0.weight, fc0.weight.grad.clipped  (0.05, 0.9, 0, 0, 1)  # fc0.weight: SGD update
18  Sgd  model/fc1.bias [2], optimizer/momentum/fc1.bias [2] <- model/fc1.bias, fc1.bias.grad.clipped  (0.05, 0.9, 0, 0, 1)  # fc1.bias: SGD update
19  Sgd  model/fc1.weight [2, 3], optimizer/momentum/fc1.weight [2, 3] <- model/fc1.weight, fc1.weight.grad.clipped  (0.05, 0.9, 0, 0, 1)  # fc1.weight: SGD update
)"));
        // The state at its start holds no momentum yet; at its end, one buffer per parameter.
        QCOMPARE(program.stateBefore.size(), std::size_t(4));
        QCOMPARE(program.stateAfter.size(), std::size_t(8));
        QCOMPARE(program.outputCount(), 26);
    }

    // Threads split the work by output element only: 1, 2, 3 and 4 give the same bits.
    void anyThreadCountGivesTheSameBits()
    {
        constexpr std::int64_t N = 33, In = 70, Out = 29;
        Stream s(9);
        const auto x = s.take(N * In), w = s.take(Out * In), b = s.take(Out), dy = s.take(N * Out);
        auto run = [&](int threads) {
            std::vector<float> y(N * Out), dx(N * In), dw(Out * In), db(Out);
            portable::linearForward(x.data(), w.data(), b.data(), y.data(), N, In, Out, threads);
            portable::linearBackward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), N, In, Out, threads);
            return digestOf({ y, dx, dw, db });
        };
        const auto one = run(1);
        for (int threads : { 2, 3, 4 })
            QCOMPARE(run(threads), one);
        QCOMPARE(digestOf(train(4)), digestOf(train(1)));
    }

    // The bits every machine must compute (recorded on an x86-64 machine; the same at -O0).
    void aTrainingRunEndsOnTheRecordedBits()
    {
        std::vector<float> losses;
        const auto weights = train(2, &losses);
        QVERIFY2(losses.back() < 0.3f * losses.front(),
            qPrintable(QStringLiteral("loss %1 -> %2").arg(losses.front()).arg(losses.back())));
        const QByteArray digest = digestOf(weights);
        qInfo("final weights %s", digest.constData());
        QCOMPARE(digest, QByteArray(RecordedDigest));
    }

private:
    static constexpr const char* RecordedDigest = "747fe0e77b7ffda8df561e7498d6af45ba12f50aa567a5f4231047723f44ed61";
};

QTEST_GUILESS_MAIN(PortableTest)
#include "tst_portable.moc"
