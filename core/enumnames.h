#pragma once

// One name table per enum, and the three things everyone does with it. An enum gets names by
// specializing EnumNames beside its declaration, in the enum's order:
//
//     enum class Colour { Red, Green };
//     template<> struct EnumNames<Colour> {
//         static constexpr std::array names { "red", "green" };
//     };
//
// nameOf(Colour::Green) is then "green", fromName<Colour>(u"red") is Colour::Red (nothing for a
// name not in the table), and namesOf<Colour>() is every name in order (for CHECK constraints,
// error messages and choices). Where names are stored or sent, the table is the contract: a
// database's CHECK constraint or docs/PROTOCOL.md says the same names, and a test holds them equal.

#include <QString>
#include <QStringList>
#include <QStringView>

#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>

namespace tessera::core {

template<typename Enum> struct EnumNames;

template<typename Enum>
concept NamedEnum = std::is_enum_v<Enum> && requires
{
    {
        EnumNames<Enum>::names.size()
        } -> std::convertible_to<std::size_t>;
};

template<NamedEnum Enum> QString nameOf(Enum value)
{
    constexpr auto& names = EnumNames<Enum>::names;
    const auto index = static_cast<std::size_t>(value);
    return index < names.size() ? QString::fromUtf8(names[index]) : QString();
}

template<NamedEnum Enum> std::optional<Enum> fromName(QStringView name)
{
    constexpr auto& names = EnumNames<Enum>::names;
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (name == QString::fromUtf8(names[i]))
            return static_cast<Enum>(i);
    }
    return std::nullopt;
}

template<NamedEnum Enum> QStringList namesOf()
{
    QStringList list;
    for (const char* name : EnumNames<Enum>::names)
        list.append(QString::fromUtf8(name));
    return list;
}

} // namespace tessera::core
