#!/usr/bin/env bash
# Whole-process timings of bayesmail against bogofilter on the same machine
# in the same run: both trained on the whole public corpus, then one fresh
# process per message classifies a sample of messages. Prints the median
# wall time per message of each tool and their ratio.
#
# Usage: benches/peers.sh [CORPUS_DIR] [MESSAGES]
#   CORPUS_DIR  the SpamAssassin public corpus (default: $BAYESMAIL_CORPUS,
#               else corpora/spamassassin)
#   MESSAGES    how many messages to time (default 200)
# Needs: bogofilter (installed with apt-get if missing and run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="${1:-${BAYESMAIL_CORPUS:-corpora/spamassassin}}"
n="${2:-200}"
[ -d "$corpus/spam-1" ] || { echo "no corpus at $corpus (run corpora/fetch)" >&2; exit 1; }
if ! command -v bogofilter >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bogofilter >/dev/null
  else
    echo "bogofilter is not installed (apt-get install bogofilter)" >&2; exit 1
  fi
fi
cargo build --release --quiet
bm="$PWD/target/release/bayesmail"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

spam=("$corpus"/spam-1 "$corpus"/spam-2)
ham=("$corpus"/easy-ham-1 "$corpus"/easy-ham-2 "$corpus"/hard-ham-1)

echo "training both on $(find "${spam[@]}" "${ham[@]}" -type f | wc -l) messages"
"$bm" --db "$work/bm" train --spam "${spam[@]}" --ham "${ham[@]}" >/dev/null
mkdir -p "$work/bogo"
find "${spam[@]}" -type f -print0 | xargs -0 cat | bogofilter -d "$work/bogo" -M -s
find "${ham[@]}" -type f -print0 | xargs -0 cat | bogofilter -d "$work/bogo" -M -n

# The same messages for both: every k-th file of the corpus.
mapfile -t files < <(find "${spam[@]}" "${ham[@]}" -type f | sort | awk -v n="$n" 'BEGIN{srand(1)} {a[NR]=$0} END{step=int(NR/n); if(step<1)step=1; for(i=1;i<=NR && c<n;i+=step){print a[i]; c++}}')

median_ms() { sort -n | awk '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1e6}'; }
time_each() {
  for f in "${files[@]}"; do
    s=$(date +%s%N); "$@" < "$f" >/dev/null 2>&1 || true; e=$(date +%s%N)
    echo $((e - s))
  done
}
# Warm the page cache for both models and binaries.
time_each "$bm" --db "$work/bm" classify - >/dev/null
time_each bogofilter -d "$work/bogo" -T >/dev/null
bm_ms=$(time_each "$bm" --db "$work/bm" classify - | median_ms)
bogo_ms=$(time_each bogofilter -d "$work/bogo" -T | median_ms)
echo "per-message process, median of ${#files[@]} messages:"
echo "  bayesmail classify -   ${bm_ms} ms"
echo "  bogofilter -T          ${bogo_ms} ms"
awk -v a="$bm_ms" -v b="$bogo_ms" 'BEGIN{printf "  ratio bayesmail/bogofilter  %.2f\n", a/b}'
du -sh "$work/bm" "$work/bogo" | sed 's/^/  size /'
