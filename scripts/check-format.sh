#!/usr/bin/env bash
# Checks (or with --fix, applies) the pinned .clang-format on every tracked C++ file.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
clang_format=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cpp' '*.h' '*.hpp' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ ${#files[@]} -eq 0 ]; then
    echo "check-format: no files"
    exit 0
fi
if [ "$mode" = "--fix" ]; then
    "$clang_format" -i "${files[@]}"
    echo "check-format: formatted ${#files[@]} files"
else
    "$clang_format" --dry-run --Werror "${files[@]}"
    echo "check-format: ${#files[@]} files follow .clang-format"
fi
