#!/usr/bin/env bash
# The format check (deploy/test.sh runs it first): every tracked C++ file is as clang-format-14
# writes it with the tree's .clang-format (Google style, 100 columns). The whole tree is checked,
# not only the files a change touched: it takes seconds and a clean clone has no "changed files".
# Fix with: git ls-files '*.cc' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
format="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$format" >/dev/null; then
  echo "check-format: $format not found (deploy/setup-debian.sh --tests installs it)" >&2
  exit 1
fi
unformatted=()
while IFS= read -r -d '' file; do
  if ! "$format" --dry-run --Werror "$file" >/dev/null 2>&1; then unformatted+=("$file"); fi
done < <(git ls-files -z '*.cc' '*.h')
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check-format: ${#unformatted[@]} file(s) differ from clang-format's output:" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  echo "check-format: run: $format -i FILE... (the tree's .clang-format applies)" >&2
  exit 1
fi
echo "check-format: $(git ls-files '*.cc' '*.h' | wc -l) files formatted"
