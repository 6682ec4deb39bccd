#include "states.h"

#include <array>

namespace tessera::core::broker {

namespace {

// One table per enum, in the enum's order.
template<typename Enum> constexpr auto Names = nullptr;
template<> constexpr std::array Names<JobState> { "running", "finished", "cancelled", "failed" };
template<> constexpr std::array Names<AssignmentState> { "active", "answered", "failed", "returned", "expired" };
template<> constexpr std::array Names<AssignmentKind> { "train", "verify", "canary" };
template<> constexpr std::array Names<ResultState> { "accepted", "sampled", "verified" };
template<> constexpr std::array Names<CheckKind> { "sample", "canary" };
template<>
constexpr std::array Names<CheckState> { "waiting", "running", "disputed", "verified", "rejected", "closed", "cancelled" };
template<> constexpr std::array Names<Loser> { "none", "accused", "verifier", "both", "job" };

} // namespace

template<typename Enum> QString nameOf(Enum value)
{
    const auto index = std::size_t(value);
    return index < Names<Enum>.size() ? QString::fromLatin1(Names<Enum>[index]) : QString();
}

template<typename Enum> std::optional<Enum> fromName(QStringView name)
{
    for (std::size_t i = 0; i < Names<Enum>.size(); ++i) {
        if (name == QLatin1String(Names<Enum>[i]))
            return Enum(i);
    }
    return std::nullopt;
}

template<typename Enum> QStringList namesOf()
{
    QStringList names;
    for (const char* name : Names<Enum>)
        names.append(QString::fromLatin1(name));
    return names;
}

// The enums that have a table.
template QString nameOf<JobState>(JobState);
template std::optional<JobState> fromName<JobState>(QStringView);
template QStringList namesOf<JobState>();
template QString nameOf<AssignmentState>(AssignmentState);
template std::optional<AssignmentState> fromName<AssignmentState>(QStringView);
template QStringList namesOf<AssignmentState>();
template QString nameOf<AssignmentKind>(AssignmentKind);
template std::optional<AssignmentKind> fromName<AssignmentKind>(QStringView);
template QStringList namesOf<AssignmentKind>();
template QString nameOf<ResultState>(ResultState);
template std::optional<ResultState> fromName<ResultState>(QStringView);
template QStringList namesOf<ResultState>();
template QString nameOf<CheckKind>(CheckKind);
template std::optional<CheckKind> fromName<CheckKind>(QStringView);
template QStringList namesOf<CheckKind>();
template QString nameOf<CheckState>(CheckState);
template std::optional<CheckState> fromName<CheckState>(QStringView);
template QStringList namesOf<CheckState>();
template QString nameOf<Loser>(Loser);
template std::optional<Loser> fromName<Loser>(QStringView);
template QStringList namesOf<Loser>();

} // namespace tessera::core::broker
