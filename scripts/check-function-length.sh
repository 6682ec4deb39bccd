#!/usr/bin/env bash
# Fails when a function of compute/, app/ or core/ is longer than 80 lines (counted by ctags, from
# its signature to its closing brace), bar the interpreters and program builders that read best
# whole (docs/ARCHITECTURE.md, "Function length"): a long function is where the next bug hides.
# Usage: check-function-length.sh [ROOT]   (default: the repository this script is in)
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
limit=80
# Scope::name of the functions allowed to be longer: each one runs a program (an interpreter's
# dispatch loop) or builds one (a model's step as a list of instructions), or is a table (a CLI's commands).
allowed='^(tessera::compute::pickle::.*::Machine::run|tessera::compute::portable::Executor::run|tessera::compute::portable::(gptStep|cnnStep)|tessera::compute::portable::StepBuilder::finish|tessera::core::settings::.*::makeKeys|__anon[0-9a-f]+::commands)$'

command -v ctags >/dev/null || { echo "check-function-length: ctags (universal-ctags) is not installed"; exit 1; }
long=$(find compute app core -type f \( -name '*.cpp' -o -name '*.h' \) | sort | while read -r file; do
    ctags --fields=+ne --c++-kinds=f --languages=C++ -x --_xformat='%{end} %{line} %{scope}::%{name}' "$file" 2>/dev/null \
        | awk -v f="$file" -v limit="$limit" '$1 != "-" { n = $1 - $2 + 1; if (n > limit) print n, f ":" $2, $3 }'
done | awk -v re="$allowed" '$3 !~ re')
if [ -n "$long" ]; then
    echo "check-function-length: functions over $limit lines (split them, or name them in 'allowed' with a reason):"
    echo "$long" | sort -rn | sed 's/^/  /'
    exit 1
fi
echo "check-function-length: no function over $limit lines outside the interpreters and builders"
