#include "cli.h"

#include <core/logtail.h>

#include <QCoreApplication>
#include <QIODevice>

#include <cstdio>

namespace tessera::app::cli {

namespace {

// Writes to a C stream, and keeps each whole line in the process's log tail (docs/CONTROL.md,
// "log"): what a node printed is what its control API shows.
class TeeDevice : public QIODevice {
public:
    TeeDevice(FILE* file, QString level)
        : m_file(file)
        , m_level(std::move(level))
    {
        core::LogTail::process(); // made first, so that it outlives this device and its stream's last flush
        open(QIODevice::WriteOnly | QIODevice::Unbuffered);
    }

protected:
    qint64 readData(char*, qint64) override { return -1; }
    qint64 writeData(const char* data, qint64 size) override
    {
        std::fwrite(data, 1, std::size_t(size), m_file);
        std::fflush(m_file);
        m_partial.append(data, size);
        for (qsizetype end = m_partial.indexOf('\n'); end >= 0; end = m_partial.indexOf('\n')) {
            const QString line = QString::fromUtf8(m_partial.left(end)).trimmed();
            if (!line.isEmpty())
                core::LogTail::process().append(m_level, line);
            m_partial.remove(0, end + 1);
        }
        if (m_partial.size() > core::LogTail::MaxLineChars * 4) // a line without an end (JSON, progress)
            m_partial.clear();
        return size;
    }

private:
    FILE* m_file;
    QString m_level;
    QByteArray m_partial;
};

} // namespace

QTextStream& out()
{
    static TeeDevice device(stdout, QStringLiteral("info"));
    static QTextStream stream(&device);
    return stream;
}

QTextStream& err()
{
    static TeeDevice device(stderr, QStringLiteral("warning"));
    static QTextStream stream(&device);
    return stream;
}

void keepMessagesInLogTail()
{
    // Qt's messages (qCInfo, qCWarning: most of what a node says) as Qt prints them, then on to
    // where they went before.
    static const QtMessageHandler previous
        = qInstallMessageHandler([](QtMsgType type, const QMessageLogContext& context, const QString& message) {
              const QString level = type == QtInfoMsg || type == QtDebugMsg ? QStringLiteral("info")
                  : type == QtWarningMsg                                    ? QStringLiteral("warning")
                                                                            : QStringLiteral("error");
              core::LogTail::process().append(level, qFormatLogMessage(type, context, message));
              if (previous)
                  previous(type, context, message);
          });
}

int fail(const QString& message)
{
    err() << QCoreApplication::applicationName() << ": " << message << Qt::endl;
    return 1;
}

int printJson(const QJsonDocument& document)
{
    out() << document.toJson() << Qt::flush;
    return 0;
}

} // namespace tessera::app::cli
