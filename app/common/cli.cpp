#include "cli.h"

#include <QCoreApplication>

namespace tessera::app::cli {

QTextStream& out()
{
    static QTextStream stream(stdout);
    return stream;
}

QTextStream& err()
{
    static QTextStream stream(stderr);
    return stream;
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
