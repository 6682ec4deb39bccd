// The portable kernels compute what they say (against float64 references), the same bits for any
// thread count, and, for a small training run of every kernel, the bits recorded below: the same
// on every CPU and at every optimisation level this test is built with (tst_portable at the
// build's, tst_portable_o0 at -O0).
#include <compute/portable/kernels.h>

#include <QCryptographicHash>
#include <QTest>

#include <cmath>
#include <cstring>
#include <vector>

using namespace tessera::compute;

namespace {

// A fixed stream of numbers in [-1, 1) from a 64-bit LCG: the same data on every machine.
class Stream {
public:
    explicit Stream(std::uint64_t seed)
        : m_state(seed)
    { }
    float next()
    {
        m_state = m_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return float(std::int64_t(m_state >> 40) - (1LL << 23)) / float(1LL << 23);
    }
    std::vector<float> take(std::size_t n, float scale = 1.0f)
    {
        std::vector<float> out(n);
        for (auto& v : out)
            v = next() * scale;
        return out;
    }

private:
    std::uint64_t m_state;
};

QByteArray digestOf(const std::vector<std::vector<float>>& tensors)
{
    QCryptographicHash hash(QCryptographicHash::Sha256);
    for (const auto& t : tensors)
        hash.addData(QByteArrayView(reinterpret_cast<const char*>(t.data()), qsizetype(t.size() * sizeof(float))));
    return hash.result().toHex();
}

// A 20-32-3 MLP on a made-up 3-class problem: 30 steps of SGD with Nesterov momentum and weight
// decay, then 30 of AdamW with gradient clipping, every kernel in the loop. The final weights.
std::vector<std::vector<float>> train(int threads, std::vector<float>* losses = nullptr)
{
    constexpr std::int64_t N = 64, In = 20, Hidden = 32, Classes = 3;
    Stream data(7);
    const auto x = data.take(std::size_t(N * In));
    std::vector<std::int64_t> y(N);
    for (std::int64_t i = 0; i < N; ++i)
        y[std::size_t(i)] = (x[std::size_t(i * In)] > 0.0f ? 1 : 0) + (x[std::size_t(i * In + 1)] > 0.3f ? 1 : 0);
    Stream init(11);
    std::vector<std::vector<float>> params { init.take(Hidden * In, 0.2f), init.take(Hidden, 0.1f),
        init.take(Classes * Hidden, 0.2f), init.take(Classes, 0.1f) };
    std::vector<std::vector<float>> grads, momentum, m, v;
    for (const auto& p : params) {
        grads.emplace_back(p.size());
        momentum.emplace_back(p.size());
        m.emplace_back(p.size());
        v.emplace_back(p.size());
    }
    std::vector<float> h(N * Hidden), a(N * Hidden), logits(N * Classes), dlogits(N * Classes), da(N * Hidden), dh(N * Hidden);
    for (int step = 1; step <= 60; ++step) {
        portable::linearForward(x.data(), params[0].data(), params[1].data(), h.data(), N, In, Hidden, threads);
        portable::reluForward(h.data(), a.data(), N * Hidden);
        portable::linearForward(a.data(), params[2].data(), params[3].data(), logits.data(), N, Hidden, Classes, threads);
        const float loss = portable::crossEntropy(logits.data(), y.data(), dlogits.data(), N, Classes);
        if (losses)
            losses->push_back(loss);
        portable::linearBackward(
            a.data(), params[2].data(), dlogits.data(), da.data(), grads[2].data(), grads[3].data(), N, Hidden, Classes, threads);
        portable::reluBackward(a.data(), da.data(), dh.data(), N * Hidden);
        portable::linearBackward(
            x.data(), params[0].data(), dh.data(), nullptr, grads[0].data(), grads[1].data(), N, In, Hidden, threads);
        for (std::size_t t = 0; t < params.size(); ++t) {
            if (step <= 30) {
                portable::sgdStep(params[t].data(), grads[t].data(), momentum[t].data(), std::int64_t(params[t].size()), 0.1f,
                    0.9f, 1e-4f, true, step == 1);
            }
        }
        if (step > 30) {
            double squares = 0.0;
            for (const auto& g : grads)
                squares += portable::sumOfSquares(g.data(), std::int64_t(g.size()));
            const float factor = portable::clipFactor(squares, 0.5);
            for (std::size_t t = 0; t < params.size(); ++t) {
                for (auto& g : grads[t])
                    g = g * factor;
                portable::adamStep(params[t].data(), grads[t].data(), m[t].data(), v[t].data(), std::int64_t(params[t].size()),
                    0.01, 0.9, 0.999, 1e-8, 0.1, true, step - 30);
            }
        }
    }
    return params;
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
