#include "httprequest.h"

#include <QUrl>

namespace tessera::control {

namespace {

HeadParse refused(int status, const QString& why)
{
    HeadParse parse;
    parse.outcome = HeadParse::Outcome::Refused;
    parse.status = status;
    parse.why = why;
    return parse;
}

bool isToken(const QByteArray& text) // RFC 9110's tchar, for methods and header names
{
    if (text.isEmpty())
        return false;
    for (const char c : text) {
        const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && !QByteArray("!#$%&'*+-.^_`|~").contains(c))
            return false;
    }
    return true;
}

bool isVisible(const QByteArray& text) // a header value: no control characters but tab
{
    for (const char c : text) {
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

// The request line "METHOD /path?query HTTP/1.1" into the head; false when it is not one.
bool readRequestLine(const QByteArray& line, HttpHead& head)
{
    const auto parts = line.split(' ');
    if (parts.size() != 3 || !isToken(parts[0]) || parts[2] != "HTTP/1.1" || !parts[1].startsWith('/') || !isVisible(parts[1]))
        return false;
    // The origin form of RFC 9112: a path and a query, never an authority ("//host/...").
    const QUrl url = QUrl::fromEncoded(parts[1], QUrl::StrictMode);
    if (parts[1].startsWith("//") || !url.isValid() || !url.isRelative() || url.hasFragment() || !url.authority().isEmpty())
        return false;
    head.method = parts[0];
    head.path = url.path(QUrl::FullyEncoded).toUtf8();
    if (!head.path.startsWith('/'))
        return false;
    head.query = QUrlQuery(url);
    return true;
}

} // namespace

QByteArray HttpHead::header(const QByteArray& lowerCaseName) const
{
    for (const auto& [name, value] : headers) {
        if (name == lowerCaseName)
            return value;
    }
    return {};
}

bool HttpHead::has(const QByteArray& lowerCaseName) const
{
    for (const auto& entry : headers) {
        if (entry.first == lowerCaseName)
            return true;
    }
    return false;
}

HeadParse parseHead(const QByteArray& bytes, const HttpLimits& limits)
{
    const qsizetype end = bytes.indexOf("\r\n\r\n");
    if (end < 0 || end + 4 > limits.maxHead) {
        if (bytes.size() > limits.maxHead || (end >= 0 && end + 4 > limits.maxHead))
            return refused(413, QStringLiteral("the request's head is over %1 bytes").arg(limits.maxHead));
        return {};
    }
    HeadParse parse;
    auto& head = parse.head;
    head.length = end + 4;
    const auto lines = bytes.left(end).split('\n');
    for (qsizetype i = 0; i < lines.size(); ++i) {
        QByteArray line = lines[i];
        if (!line.endsWith('\r') && i + 1 < lines.size())
            return refused(400, QStringLiteral("a line of the request does not end in CR LF"));
        if (line.endsWith('\r'))
            line.chop(1);
        if (line.size() > limits.maxLine)
            return refused(400, QStringLiteral("a line of the request is over %1 bytes").arg(limits.maxLine));
        if (i == 0) {
            if (!readRequestLine(line, head))
                return refused(400, QStringLiteral("not an HTTP/1.1 request line"));
            continue;
        }
        const qsizetype colon = line.indexOf(':');
        const QByteArray name = colon > 0 ? line.left(colon).toLower() : QByteArray();
        const QByteArray value = colon > 0 ? line.mid(colon + 1).trimmed() : QByteArray();
        if (!isToken(name) || !isVisible(value))
            return refused(400, QStringLiteral("a malformed header line"));
        if (head.headers.size() >= limits.maxHeaders)
            return refused(400, QStringLiteral("over %1 headers").arg(limits.maxHeaders));
        head.headers.append({ name, value });
    }
    if (head.has("transfer-encoding"))
        return refused(400, QStringLiteral("Transfer-Encoding is not taken: send a Content-Length"));
    // Headers a check reads once: two of one would let the check and the caller read different ones.
    for (const QByteArray once : { "content-length", "host", "origin", "authorization", "upgrade" }) {
        int count = 0;
        for (const auto& entry : head.headers)
            count += entry.first == once;
        if (count > 1)
            return refused(400, QStringLiteral("more than one %1 header").arg(QString::fromLatin1(once)));
    }
    if (head.has("content-length")) {
        const QByteArray text = head.header("content-length");
        bool digits = !text.isEmpty() && text.size() <= 18;
        for (const char c : text)
            digits = digits && c >= '0' && c <= '9';
        if (!digits)
            return refused(400, QStringLiteral("Content-Length is not a number"));
        head.contentLength = text.toLongLong();
        if (head.contentLength > limits.maxBody)
            return refused(413, QStringLiteral("the body is over %1 bytes").arg(limits.maxBody));
    }
    if (head.header("host").isEmpty())
        return refused(400, QStringLiteral("no Host header"));
    parse.outcome = HeadParse::Outcome::Complete;
    return parse;
}

} // namespace tessera::control
