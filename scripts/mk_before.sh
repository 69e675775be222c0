#!/usr/bin/env bash
# mk_before.sh [REV]: .before/ holds the plugin (sglang_ddtree/ and kernels/) as of git revision REV (default HEAD),
# for scripts/gpu/70_ab.sh's AB_BEFORE=1 server, the served default on that older copy. The files under
# sglang_ddtree/engine/models/ are left out but for their *.json (what the package may read at import): the servers
# get their model paths on the command line, so .before/ stays a few MB and can travel with the working tree (an
# ignored folder: carry it). .before/ is ignored through .git/info/exclude; .before/REVISION names the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD}
COMMIT=$(git rev-parse --verify "$REV^{commit}")
mapfile -t FILES < <(git ls-tree -r --name-only "$COMMIT" -- sglang_ddtree kernels \
  | awk '!/^sglang_ddtree\/engine\/models\// || /\.json$/')
rm -rf .before && mkdir .before
git archive "$COMMIT" -- "${FILES[@]}" | tar -x -C .before
echo "$COMMIT" > .before/REVISION
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF /.before/ "$EXCLUDE" 2>/dev/null || echo /.before/ >> "$EXCLUDE"
echo ".before: $REV ($COMMIT), $(du -sh .before | cut -f1)"
