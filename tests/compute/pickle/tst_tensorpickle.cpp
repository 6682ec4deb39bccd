// The reader of torch.save pickle programs, without torch (so the sanitizer build runs it): what
// PyTorch and LibTorch write reads as the right views of the right storages, and hostile programs
// (cut short, self-referencing, deeply nested, bombs, code) end in an error, never a crash or a leak.

#include <compute/pickle/tensorfile.h>
#include <compute/pickle/tensorpickle.h>
#include <compute/pickle/tensorwriter.h>

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstring>

using namespace tessera::compute::pickle;

namespace {

QByteArray golden(const char* name)
{
    QFile file(QStringLiteral(TESSERA_SOURCE_DIR "/fuzz/corpus/tensorpickle/") + QString::fromLatin1(name));
    if (!file.open(QIODevice::ReadOnly))
        qFatal("missing golden pickle %s", name);
    return file.readAll();
}

QString errorOf(const QByteArray& program)
{
    const auto read = readTensorMap(program);
    return read ? QString() : read.error().message;
}

// A program written as a string literal, NUL bytes included.
template<std::size_t N> QString errorOf(const char (&program)[N])
{
    return errorOf(QByteArray(program, N - 1));
}

} // namespace

class TensorPickleTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // What tessera-job chunk writes: read back here without LibTorch, and by torch.load.
    void aWrittenFileReadsBackAndTorchLoadsIt()
    {
        QByteArray x(6 * 4, Qt::Uninitialized), y(3 * 8, Qt::Uninitialized);
        for (int i = 0; i < 6; ++i) {
            const float value = float(i) - 2.5f;
            std::memcpy(x.data() + 4 * i, &value, 4);
        }
        for (int i = 0; i < 3; ++i) {
            const std::int64_t value = 7 - i;
            std::memcpy(y.data() + 8 * i, &value, 8);
        }
        const QByteArray tokens("\x01\x02\xff\x00", 4);
        const QList<TensorData> tensors { { QStringLiteral("x"), DType::Float32, { 3, 2 }, x },
            { QStringLiteral("y"), DType::Int64, { 3 }, y }, { QStringLiteral("tokens"), DType::UInt8, { 2, 2 }, tokens } };
        const QByteArray file = writeTensorFile(tensors);
        auto read = TensorFile::read(file);
        QVERIFY2(read.ok(), qPrintable(read.ok() ? QString() : read.error().toString()));
        QCOMPARE(read->tensors().size(), 3);
        for (const auto& written : tensors) {
            const auto found = std::find_if(read->tensors().begin(), read->tensors().end(),
                [&](const TensorRef& tensor) { return tensor.name == written.name; });
            QVERIFY(found != read->tensors().end());
            QCOMPARE(found->dtype, written.dtype);
            QCOMPARE(found->sizes, written.sizes);
            QCOMPARE(read->contiguousBytes(*found), written.bytes);
        }
        QTemporaryDir dir;
        QFile out(dir.filePath(QStringLiteral("t.pt")));
        QVERIFY(out.open(QIODevice::WriteOnly) && out.write(file) == file.size());
        out.close();
        QProcess python;
        python.start(QStringLiteral("/usr/bin/python3"),
            { QStringLiteral("-c"),
                QStringLiteral("import sys, torch; d = torch.load(sys.argv[1]); "
                               "print(list(d), d['x'].tolist(), d['y'].tolist(), d['tokens'].dtype, d['tokens'].tolist())"),
                out.fileName() });
        QVERIFY(python.waitForFinished(120'000));
        QCOMPARE(QString::fromUtf8(python.readAllStandardOutput()).trimmed(),
            QStringLiteral(
                "['x', 'y', 'tokens'] [[-2.5, -1.5], [-0.5, 0.5], [1.5, 2.5]] [7, 6, 5] torch.uint8 [[1, 2], [255, 0]]"));
    }

    // Whole files of tensors, read without LibTorch (what a node's supervisor checks its worker's
    // weights with): the canonical hash of each is what PyTorch gives by docs/DETERMINISM.md's
    // recipe (computed with it when the files were made): plain tensors, a transposed and a row
    // view of one storage, bfloat16, a 0-dimensional, an empty and a bool tensor.
    void hashesWholeTorchSaveFilesAsPyTorchDoes_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("hash");
        QTest::newRow("plain") << "plain.pt"
                               << "444b0cb534f5fdf3102a92b69581d4962f26d043a1439c3b936fa80938b07d17";
        QTest::newRow("views") << "views.pt"
                               << "fc15e4da8a0569a38c6e0b1708de271a17ad647d94ae21b8d19162518cf11b3e";
        QTest::newRow("scalars") << "scalars.pt"
                                 << "fd9288373e4a75f99e75e2eda4f61c17c8ac6f9b93c3d020abdcffb32c601d99";
    }
    void hashesWholeTorchSaveFilesAsPyTorchDoes()
    {
        QFETCH(QString, file);
        QFETCH(QString, hash);
        QFile in(QStringLiteral(TESSERA_SOURCE_DIR "/fuzz/corpus/tensorfile/") + file);
        QVERIFY(in.open(QIODevice::ReadOnly));
        const QByteArray bytes = in.readAll();
        const auto digest = canonicalHash(bytes);
        QVERIFY2(digest, qPrintable(digest ? QString() : digest.error().toString()));
        QCOMPARE(digest->toHex(), hash);

        // Cut anywhere, or with a byte changed in its directory, it is an error or a hash, never a
        // crash (ASan build); cut before its directory's end, always an error.
        for (qsizetype cut = 0; cut < bytes.size(); cut += 7)
            QVERIFY(!canonicalHash(bytes.left(cut)));
        for (qsizetype at = bytes.size() - 200; at < bytes.size(); ++at) {
            QByteArray changed = bytes;
            changed[at] = char(changed[at] ^ 0x5a);
            (void)canonicalHash(changed);
        }
        // Not an archive.
        const auto notZip = canonicalHash(QByteArray(100, 'x'));
        QVERIFY(!notZip);
        QVERIFY2(notZip.error().message.contains(QStringLiteral("zip archive")), qPrintable(notZip.error().message));
    }

    void readsAStateDictWrittenByPyTorch()
    {
        // torch.save(OrderedDict(w=torch.arange(6.).reshape(2, 3))) with state_dict()'s _metadata.
        const auto read = readTensorMap(golden("state_dict.pkl"));
        QVERIFY2(read, qPrintable(errorOf(golden("state_dict.pkl"))));
        QCOMPARE(read->size(), 1);
        const auto& w = read->first();
        QCOMPARE(w.name, QStringLiteral("w"));
        QCOMPARE(w.dtype, DType::Float32);
        QCOMPARE(w.sizes, (QList<std::int64_t> { 2, 3 }));
        QCOMPARE(w.strides, (QList<std::int64_t> { 3, 1 }));
        QCOMPARE(w.offset, 0);
        QCOMPARE(w.storageKey, QStringLiteral("0"));
        QCOMPARE(w.storageNumel, 6);
    }

    void readsProtocolFourViewsAndScalars()
    {
        // torch.save({"w": t.t(), "n": torch.tensor(3)}, pickle_protocol=4)
        const auto read = readTensorMap(golden("protocol4.pkl"));
        QVERIFY2(read, qPrintable(errorOf(golden("protocol4.pkl"))));
        QCOMPARE(read->size(), 2);
        QCOMPARE(read->at(0).name, QStringLiteral("w"));
        QCOMPARE(read->at(0).sizes, (QList<std::int64_t> { 3, 2 }));
        QCOMPARE(read->at(0).strides, (QList<std::int64_t> { 1, 3 }));
        QCOMPARE(read->at(1).name, QStringLiteral("n"));
        QCOMPARE(read->at(1).dtype, DType::Int64);
        QVERIFY(read->at(1).sizes.isEmpty());
        QCOMPARE(read->at(1).storageKey, QStringLiteral("1"));
    }

    void readsParametersAndLibTorchsTypedDicts()
    {
        const auto parameters = readTensorMap(golden("parameters.pkl"));
        QVERIFY2(parameters, qPrintable(errorOf(golden("parameters.pkl"))));
        QCOMPARE(parameters->first().name, QStringLiteral("p"));
        const auto libtorch = readTensorMap(golden("libtorch.pkl")); // torch::pickle_save of a c10::Dict
        QVERIFY2(libtorch, qPrintable(errorOf(golden("libtorch.pkl"))));
        QCOMPARE(libtorch->size(), 4);
        QCOMPARE(libtorch->first().name, QStringLiteral("fc0.bias"));
    }

    void aProgramCutShortIsAnErrorAtEveryLength()
    {
        for (const char* name : { "state_dict.pkl", "protocol4.pkl", "libtorch.pkl" }) {
            const auto program = golden(name);
            for (qsizetype length = 0; length < program.size(); ++length)
                QVERIFY2(!readTensorMap(QByteArrayView(program).first(length)), qPrintable(QString::number(length)));
        }
    }

    void codeIsNeverCalled()
    {
        // What pickle.loads would turn into os.system("touch x").
        QVERIFY(errorOf("\x80\x02"
                        "cposix\nsystem\n"
                        "X\x07\x00\x00\x00touch x\x85R.")
                    .contains(u"posix.system"));
        QVERIFY(errorOf("\x80\x02"
                        "cbuiltins\neval\n.")
                    .contains(u"builtins.eval"));
        QVERIFY(errorOf("\x80\x02"
                        "ctorch._utils\n_rebuild_sparse_tensor\n.")
                    .contains(u"_rebuild_sparse_tensor"));
    }

    void hostileShapesEndInErrors()
    {
        // A list that contains itself: refused (not a dict), freed without leaking (ASan checks).
        QVERIFY(errorOf("\x80\x02]q\x00h\x00"
                        "a.")
                    .contains(u"a list"));
        QVERIFY(errorOf("\x80\x02}q\x00h\x00h\x00s.").contains(u"a key is a dict"));
        // Lists nested 200,000 deep: no recursion when they are freed.
        QByteArray deep("\x80\x02");
        deep += QByteArray(200'000, ']');
        deep += QByteArray(199'999, 'a');
        deep += '.';
        QVERIFY(errorOf(deep).contains(u"a list"));
        // Two million copies of None: bounded.
        QByteArray bomb("\x80\x02N");
        bomb += QByteArray(2'000'000, '2');
        QVERIFY(errorOf(bomb).contains(u"stack grows"));
        // Memo entries that were never stored, a mark never closed, an unknown opcode.
        QVERIFY(errorOf("\x80\x02h\x05.").contains(u"never stored"));
        QVERIFY(errorOf("\x80\x02(}.").contains(u"one object"));
        QVERIFY(errorOf("\x80\x02\xff.").contains(u"opcode 0xff"));
        // A tensor that reaches past its storage (6 elements, a view of 7).
        QByteArray past = golden("state_dict.pkl");
        past.replace(QByteArray("K\x06t", 3), QByteArray("K\x05t", 3)); // the storage holds 5, not 6
        QVERIFY(errorOf(past).contains(u"past the end of its storage"));
    }
};

QTEST_GUILESS_MAIN(TensorPickleTest)
#include "tst_tensorpickle.moc"
