#pragma once

#include <QByteArray>
#include <QList>
#include <QString>
#include <QUrlQuery>

#include <utility>

namespace tessera::control {

// The limits of docs/CONTROL.md, "What is refused".
struct HttpLimits {
    qsizetype maxHead = 16 * 1024; // request line and headers
    qsizetype maxLine = 8 * 1024; // one header line
    int maxHeaders = 100;
    qsizetype maxBody = 64 * 1024;
};

// One HTTP/1.1 request's head (docs/CONTROL.md): the method, the path and query of its target,
// and its headers (names in lower case, values without surrounding white space).
struct HttpHead {
    QByteArray method;
    QByteArray path;
    QUrlQuery query;
    QList<std::pair<QByteArray, QByteArray>> headers;
    qsizetype length = 0; // of the head in bytes, through its empty line
    qsizetype contentLength = 0;

    QByteArray header(const QByteArray& lowerCaseName) const; // empty when absent
    bool has(const QByteArray& lowerCaseName) const;
};

// What parseHead made of the bytes so far: a whole head, not yet one, or a refusal (an HTTP
// status, 400 or 413, and why).
struct HeadParse {
    enum class Outcome { Incomplete, Complete, Refused } outcome = Outcome::Incomplete;
    HttpHead head;
    int status = 0;
    QString why;
};

// Parses the head at the start of `bytes` (what a connection sent so far, which may hold part of
// the body too). Pure and total: any bytes give one of the three outcomes.
HeadParse parseHead(const QByteArray& bytes, const HttpLimits& limits = {});

} // namespace tessera::control
