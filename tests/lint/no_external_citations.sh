#!/usr/bin/env bash
# Every markdown document a file of the repository names must be in the repository: a comment
# that cites a design note kept elsewhere leaves the reader of the code with nothing to open.
#
#   tests/lint/no_external_citations.sh [REPO_ROOT]    (default: two folders up from this script)
#
# Scans the text files under the folders below (and the top-level README.md and CMake files) for
# names ending in ".md" and checks that each one resolves to a file: relative to the repository
# root ("docs/formats.md"), relative to the folder of the file that names it (markdown links such
# as "../README.md"), or, for a bare name, under docs/ ("formats.md"). URLs are not checked.
# The study's output file (report.md, written by `mixp compare` into a folder the user names, as
# in "DIR/report.md") is a run-time path, not a document, and is skipped when a folder precedes it.
# Prints each unresolved name as "file:line: name" and exits 1 if there is any, else exits 0.
# Run by CTest as the test "lint" (tests/lint/run_test.cmake).
set -euo pipefail

root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"

dirs=()
for d in src include tools tests bench docs scripts examples cmake; do
  [[ -d "$d" ]] && dirs+=("$d")
done
top=()
for f in README.md CMakeLists.txt CMakePresets.json; do
  [[ -f "$f" ]] && top+=("$f")
done
self="tests/lint/$(basename "$0")"

# One match per line: "path:line:name" plus the character after the name (or nothing at the end
# of a line), so that "x.mdx" or "x.md5" do not count. A URL is matched as a whole first, so the
# ".md" inside it is never seen on its own.
pattern='(https?://[^[:space:]]*|[A-Za-z0-9_./-]*[A-Za-z0-9_]\.md)([^A-Za-z0-9_]|$)'

bad=0
checked=0
while IFS= read -r hit; do
  file="${hit%%:*}"
  rest="${hit#*:}"
  line="${rest%%:*}"
  name="${rest#*:}"
  [[ "$file" == "$self" ]] && continue
  name="${name%[^A-Za-z0-9_]}"  # drop the character after the name
  [[ "$name" == http://* || "$name" == https://* ]] && continue
  [[ "$name" == *.md ]] || continue
  if [[ "$name" == */report.md && "$name" != docs/* ]]; then
    continue  # the precision study's output, e.g. DIR/report.md
  fi
  checked=$((checked + 1))
  candidates=("$name" "$(dirname "$file")/$name")
  [[ "$name" != */* ]] && candidates+=("docs/$name")
  found=0
  for c in "${candidates[@]}"; do
    if [[ -f "$c" ]]; then
      found=1
      break
    fi
  done
  if ((found == 0)); then
    echo "$file:$line: $name (no such file in the repository)"
    bad=$((bad + 1))
  fi
done < <(grep -RnoIE "$pattern" "${dirs[@]}" "${top[@]}" || true)

if ((bad > 0)); then
  echo "$bad reference(s) to markdown files that are not in the repository; move the document" \
       "into docs/ or cite one that is here" >&2
  exit 1
fi
echo "$checked references to markdown files checked, all present"
