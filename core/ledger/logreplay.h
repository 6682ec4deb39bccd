#pragma once

#include "../error.h"
#include "../hash.h"

#include <QHash>
#include <QJsonObject>
#include <QSet>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace tessera::core::ledger {

// The root of a log read from its start, leaf by leaf, in little memory: the perfect subtrees
// that make up the leaves so far (a compact range, at most 64 hashes), as a checker streams a whole
// log (docs/LEDGER.md, "Audit").
class Frontier {
public:
    void append(const Digest& leaf);
    std::int64_t size() const { return m_size; }
    Digest root() const; // RFC 6962's MTH of the leaves so far

private:
    std::int64_t m_size = 0;
    std::vector<Digest> m_subtrees; // largest first; their sizes are the bits of m_size
};

// A log's entries replayed into the accounts they move (docs/LEDGER.md, "Audit"): every transfer's
// amount from debit to credit, each cause once, no account but the mint below zero, and every
// slash for a check followed by that check's ruling against the node it slashed. What breaks a
// rule is kept in `problems`, with the entry's index.
class LogReplay {
public:
    // One entry: its leaf's exact bytes. Also hashes it into the frontier.
    void add(const QString& leaf);

    std::int64_t size() const { return m_frontier.size(); }
    Digest root() const { return m_frontier.root(); }
    // Micro-credits each account holds after the entries so far (mint: minus all ever minted).
    const QHash<QString, std::int64_t>& balances() const { return m_balances; }
    std::int64_t balanceOf(const QString& account) const { return m_balances.value(account, 0); }
    int transfers() const { return m_transfers; }
    int verdicts() const { return m_verdicts; }
    // The problems found so far, with slashes still waiting for a ruling.
    QStringList problems() const;

private:
    void addTransfer(std::int64_t index, const QJsonObject& entry);
    void addVerdict(const QJsonObject& entry);
    void checkSlash(std::int64_t index, const QString& debit, const QString& cause);

    Frontier m_frontier;
    QHash<QString, std::int64_t> m_balances;
    QSet<QString> m_causes;
    // Slashes for a check with no ruling against their node yet: check -> cause -> (node, index).
    QHash<QString, QHash<QString, std::pair<QString, std::int64_t>>> m_unruledSlashes;
    QStringList m_problems;
    int m_transfers = 0;
    int m_verdicts = 0;
};

} // namespace tessera::core::ledger
