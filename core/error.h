#pragma once

#include <QString>

#include <cassert>
#include <optional>
#include <utility>
#include <variant>

namespace tessera::core {

// A failure that a person can act on: which field (or resource) was wrong and why.
// The field is a dotted path such as "optimizer.lr" when the error comes from a document.
struct Error {
    QString field;
    QString message;
    // The disk (or the database's quota) had no room: nothing was written. The broker answers
    // "disk-full" instead of blaming the request.
    bool diskFull = false;

    QString toString() const { return field.isEmpty() ? message : field + QStringLiteral(": ") + message; }
    bool operator==(const Error&) const = default;
};

// Either a value or an Error. Tessera's code paths that take outside input return this instead
// of throwing, so that bad input never unwinds through an event loop.
template<typename T, typename E = Error> class Result {
public:
    Result(T value)
        : m_state(std::move(value))
    { }
    Result(E error)
        : m_state(std::move(error))
    { }

    bool ok() const { return std::holds_alternative<T>(m_state); }
    explicit operator bool() const { return ok(); }

    const T& value() const&
    {
        assert(ok());
        return std::get<T>(m_state);
    }
    T& value() &
    {
        assert(ok());
        return std::get<T>(m_state);
    }
    T&& value() &&
    {
        assert(ok());
        return std::get<T>(std::move(m_state));
    }
    T value_or(T fallback) const { return ok() ? value() : std::move(fallback); }
    const T& operator*() const& { return value(); }
    T& operator*() & { return value(); }
    T&& operator*() && { return std::move(*this).value(); }
    const T* operator->() const { return &value(); }
    T* operator->() { return &value(); }

    const E& error() const
    {
        assert(!ok());
        return std::get<E>(m_state);
    }

private:
    std::variant<T, E> m_state;
};

// Result<void>: success or an error.
template<typename E = Error> class BasicStatus {
public:
    BasicStatus() = default;
    BasicStatus(E error)
        : m_error(std::move(error))
    { }

    bool ok() const { return !m_error.has_value(); }
    explicit operator bool() const { return ok(); }
    const E& error() const
    {
        assert(!ok());
        return *m_error;
    }

private:
    std::optional<E> m_error;
};

using Status = BasicStatus<Error>;

} // namespace tessera::core
