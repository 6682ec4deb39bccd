// libFuzzer target: the control API's HTTP request head (control::parseHead, docs/CONTROL.md),
// what any program on the machine may send the node. Any bytes give an answer, and a head it
// takes lies within the bytes, within the limits.

#include <control/httprequest.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using tessera::control::HeadParse;
    const QByteArray bytes(reinterpret_cast<const char*>(data), qsizetype(size));
    const tessera::control::HttpLimits limits;
    const auto parse = tessera::control::parseHead(bytes, limits);
    if (parse.outcome == HeadParse::Outcome::Refused && parse.status != 400 && parse.status != 413)
        __builtin_trap();
    if (parse.outcome != HeadParse::Outcome::Complete)
        return 0;
    const auto& head = parse.head;
    if (head.length > bytes.size() || head.length > limits.maxHead || head.contentLength < 0
        || head.contentLength > limits.maxBody || head.method.isEmpty() || !head.path.startsWith('/')
        || head.headers.size() > limits.maxHeaders || head.header("host").isEmpty())
        __builtin_trap();
    return 0;
}
