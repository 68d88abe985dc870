#!/bin/sh
# Peak memory of `bayesmail scan` over many large messages (issue 15, F11).
#
# Builds a Maildir of COUNT messages of about SIZE_MB each in a temporary
# directory, trains a database on corpora/sample, scans the Maildir under
# /usr/bin/time -v and prints the peak resident set size. Nothing large is
# kept: the temporary directory is removed on exit.
#
#   tests/hostile/scan-memory.sh [BINARY] [COUNT] [SIZE_MB]
#
# BINARY defaults to the release build (cargo build --release first).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$here/target/release/bayesmail}
count=${2:-200}
size_mb=${3:-4.7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp/inbox" "$count" "$size_mb" <<'PY'
import os, random, sys
root, count, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for sub in ("cur", "new", "tmp"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
rng = random.Random(15)
words = ["offer", "free", "meeting", "invoice", "viagra", "project", "cheap",
         "tomorrow", "winner", "report", "click", "lunch", "prize", "budget"]
target = int(size * 1_000_000)
for i in range(count):
    lines = [f"From: sender{i}@example.com", "To: you@example.org",
             f"Subject: message {i}", "Message-ID: <%d@example.com>" % i, ""]
    body_len = 0
    body = []
    while body_len < target:
        line = " ".join(rng.choice(words) + str(rng.randrange(100000)) for _ in range(10))
        body.append(line)
        body_len += len(line) + 1
    with open(os.path.join(root, "new", f"{i}.gen.host"), "w") as f:
        f.write("\n".join(lines + body) + "\n")
PY

db="$tmp/db"
: > "$tmp/config.toml"
"$bin" --db "$db" --config "$tmp/config.toml" train \
    --spam "$here/corpora/sample/spam" --ham "$here/corpora/sample/ham" >/dev/null
du -sh "$tmp/inbox"
/usr/bin/time -v "$bin" --db "$db" --config "$tmp/config.toml" scan --no-progress \
    "$tmp/inbox" >/dev/null 2>"$tmp/time.txt" || true
grep -E "Maximum resident|Elapsed|Exit status" "$tmp/time.txt"
