// The compute worker's protocol (compute/supervisor/sandbox/workerprotocol.h) as it is spelled on the pipe and
// in the scratch folder: a golden test, as tst_messages is for the network protocol. A change
// here is a change between the supervisor and tessera-compute, which ship together, but the
// scratch folder's names are also what docs/SECURITY.md's confinement allows the worker to read.

#include <compute/supervisor/sandbox/workerprotocol.h>

#include <QJsonObject>
#include <QTest>

namespace protocol = tessera::compute::sandbox::protocol;

namespace {

QStringList words(const char* text)
{
    return QString::fromLatin1(text).split(u' ');
}

} // namespace

class WorkerProtocolTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void namesAreSpelledAsTheWorkerReadsThem()
    {
        using namespace protocol;
        QCOMPARE(
            QStringList({ commands::Train, commands::Serve, commands::Probe, commands::Profile, commands::Benchmark,
                commands::Rebuild, commands::Replay, commands::Initial, commands::Evaluate, commands::Sample, commands::Answer }),
            words("train serve probe profile benchmark rebuild replay initial evaluate sample answer"));
        QCOMPARE(QStringList({ files::Task, files::Job, files::WeightsIn, files::WeightsOut, files::KeptIn, files::KeptOut,
                     files::SuspendedIn, files::SuspendedOut, files::StateIn, files::RoundIn, files::PreviousIn, files::ChangeIn,
                     files::PromptIn, files::Result, files::AnswerOut, files::AnswerMeta, files::Error, files::Probe }),
            words("task.json job.json weights.in weights.out kept.in kept.out suspended.in suspended.out state.in round.in "
                  "previous.in change.in prompt.in result.json answer.out answer.json error.txt probe.txt"));
        QCOMPARE(QStringList({ requests::Start, requests::Resume, requests::Suspend, requests::Finish, requests::Quit }),
            words("start resume suspend finish quit"));
        QCOMPARE(answers::Suspended, QStringLiteral("suspended"));
        QCOMPARE(answers::Finished, QStringLiteral("finished"));
        QCOMPARE(lines::Done, QByteArray("done"));
    }

    // A served replica's requests and answers (docs/PROTOCOL.md, "Serving").
    void aReplicasLinesReadBack()
    {
        using namespace protocol;
        QCOMPARE(requests::Host, QStringLiteral("host"));
        QCOMPARE(answers::Hosted, QStringLiteral("hosted"));
        const QJsonObject question { { QStringLiteral("prompt"), QStringLiteral("Hi\n") } };
        QCOMPARE(requests::ask(question), QStringLiteral(R"(ask {"prompt":"Hi\n"})"));
        QCOMPARE(requests::questionOf(requests::ask(question)), question);
        QVERIFY(!requests::questionOf(QStringLiteral("ask [1]")));
        QVERIFY(!requests::questionOf(QStringLiteral("step 3")));
        QCOMPARE(answers::tokens(4, { 72, 105 }), QStringLiteral("tokens 4 72,105"));
        QCOMPARE(answers::tokensOf(QStringLiteral("tokens 4 72,105"))->second, QList<std::int64_t>({ 72, 105 }));
        QVERIFY(!answers::tokensOf(QStringLiteral("tokens 4 72,x")));
        QVERIFY(!answers::tokensOf(QStringLiteral("tokens four 1")));
        QCOMPARE(answers::answered(R"({"index":0})"), QStringLiteral(R"(answered {"index":0})"));
        QCOMPARE(*answers::answeredOf(QStringLiteral(R"(answered {"index":0})")), QByteArray(R"({"index":0})"));
        QVERIFY(!answers::answeredOf(QStringLiteral("finished")));
    }

    void linesReadBackAndMalformedOnesAreRefused()
    {
        using namespace protocol;
        QCOMPARE(requests::step(25), QStringLiteral("step 25"));
        QCOMPARE(*requests::stepsOf(QStringLiteral("step 25")), 25);
        for (const char* bad : { "step", "step -1", "step 2x", "step 1 2", "stepp 1", "" })
            QVERIFY2(!requests::stepsOf(QString::fromLatin1(bad)), bad);

        QCOMPARE(answers::ok(7), QStringLiteral("ok 7"));
        QCOMPARE(answers::error(QStringLiteral("out of\nmemory")), QStringLiteral("error out of memory")); // one line
        QCOMPARE(*answers::errorOf(QStringLiteral("error out of memory")), QStringLiteral("out of memory"));
        QVERIFY(!answers::errorOf(QStringLiteral("ok 7")));

        const answers::Stepped stepped { 40, 0.123456789, 987654321 };
        QCOMPARE(answers::stepped(stepped), QStringLiteral("stepped 40 0.123456789 987654321"));
        const auto back = answers::steppedOf(answers::stepped(stepped));
        QVERIFY(back && back->completed == 40 && back->loss == 0.123456789 && back->busyNs == 987654321);
        for (const char* bad : { "stepped 40 0.1", "stepped x 0.1 3", "stepped 40 nan? 3", "ok 40 0.1 3" })
            QVERIFY2(!answers::steppedOf(QString::fromLatin1(bad)), bad);

        QCOMPARE(lines::progress({ 3, 100, 2.5, 1200 }), QByteArray("progress 3 100 2.5 1200"));
        const auto progress = lines::progressOf("progress 3 100 2.5 1200");
        QVERIFY(progress && progress->step == 3 && progress->steps == 100 && progress->loss == 2.5 && progress->busyMs == 1200);
        for (const char* bad : { "progress 3 100 2.5", "progress 3 100 x 1200", "done", "progress 3 100 2.5 1200 9" })
            QVERIFY2(!lines::progressOf(bad), bad);

        QCOMPARE(lines::benchmark({ QStringLiteral("matmul"), 4 }), QByteArray("benchmark matmul 4"));
        const auto benchmark = lines::benchmarkOf("benchmark matmul 4");
        QVERIFY(benchmark && benchmark->name == QStringLiteral("matmul") && benchmark->repetition == 4);
        QVERIFY(!lines::benchmarkOf("benchmark matmul"));
        QVERIFY(!lines::benchmarkOf("benchmark matmul four"));
    }

    void aStagesTensorsReadBack()
    {
        using namespace protocol;
        const links::Address to { 1, tessera::core::TensorKind::Gradient, 3, 2 };
        QCOMPARE(links::send(to, QByteArray("\x00\x01\xff", 3)), QByteArray("send 1 gradient 3 2 AAH/"));
        const auto sent = links::sendOf("send 1 gradient 3 2 AAH/");
        QVERIFY(sent && sent->first == to && sent->second == QByteArray("\x00\x01\xff", 3));
        QCOMPARE(links::receive({ 0, tessera::core::TensorKind::Squares, 0, 0 }), QByteArray("receive 0 squares 0 0"));
        QCOMPARE(
            links::receiveOf("receive 2 activation 7 1"), links::Address({ 2, tessera::core::TensorKind::Activation, 7, 1 }));
        QVERIFY(links::isLinkRequest("receive x") && links::isLinkRequest("send 1") && !links::isLinkRequest("stepped 1 2 3"));
        QCOMPARE(links::tensor("abc"), QByteArray("tensor YWJj"));
        QCOMPARE(*links::tensorOf("tensor YWJj"), QByteArray("abc"));
        QCOMPARE(*links::tensorOf("tensor "), QByteArray()); // an empty tensor is a tensor
        QCOMPARE(links::failed(QStringLiteral("stage 2\nwent")), QStringLiteral("link-error stage 2 went"));
        QCOMPARE(*links::failedOf(QStringLiteral("link-error stage 2 went")), QStringLiteral("stage 2 went"));
        for (const char* bad :
            { "send 1 gradient 3 2", "send -1 gradient 3 2 AAAA", "send 1 weights 3 2 AAAA", "send 1 gradient 3 2 AA?A",
                "send 1 gradient x 2 AAAA", "send 1 gradient 3 2 AAAA extra", "receive 1 gradient 3 2" })
            QVERIFY2(!links::sendOf(bad), bad);
        for (const char* bad : { "receive 1 gradient 3", "receive 1 gradient 3 -2", "receive one gradient 3 2",
                 "receive 1 Gradient 3 2", "send 1 gradient 3 2 AAAA" })
            QVERIFY2(!links::receiveOf(bad), bad);
        for (const char* bad : { "tensor !!", "tensors YWJj", "sent YWJj", "tensor" })
            QVERIFY2(!links::tensorOf(bad), bad);
        QVERIFY(!links::failedOf(QStringLiteral("error stage 2 went")));
    }
};

QTEST_APPLESS_MAIN(WorkerProtocolTest)
#include "tst_workerprotocol.moc"
