//! Keeping a model in Redis small: expiry of rare and old word tokens
//! ([`RedisStore::expire`], `prune`'s rule) and a memory cap that removes
//! the least seen, oldest tokens first until the model fits
//! ([`RedisStore::cap`]).
//!
//! Only word tokens expire: the byte view's buckets are bounded in number,
//! and the registry of learned messages is what keeps learning idempotent
//! (it is counted in the memory, and a cap below what it and the buckets
//! take is refused). A removed token counts as never seen; a message
//! unlearned later takes its counts back to zero at most, as after
//! `prune`.
//!
//! The tokens are read page by page (HSCAN, no command holds Redis for the
//! whole hash), and each page's chosen tokens are removed by one script
//! that checks each again: one a host learned meanwhile (its counts grew
//! or its day moved) stays. The script moves the generation, so every
//! host reads the counts again.

use std::collections::BTreeMap;

use redis::Script;

use super::{Error, RedisStore, Result};
use crate::model::TokenCounts;

/// Removes the tokens among its fields the rule still removes. KEYS:
/// meta, words. ARGV: count, before, edge_before, last (the day of the
/// last group, or -1; see [`Expiry`]), then the fields. Returns how many
/// it removed.
pub(super) const EXPIRE: &str = r#"
local count, before, edge = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local last = tonumber(ARGV[4])
local removed = 0
for i = 5, #ARGV do
  local v = redis.call('HGET', KEYS[2], ARGV[i])
  if v then
    local h, s, day = struct.unpack('<I4I4I4', v)
    local n = h + s
    if (n < count and day < before) or (n == count and (day < edge or day == last)) then
      redis.call('HDEL', KEYS[2], ARGV[i])
      removed = removed + 1
    end
  end
end
if removed > 0 then
  redis.call('HINCRBY', KEYS[1], 'tokens', -removed)
  redis.call('HINCRBY', KEYS[1], 'generation', 1)
end
return removed
"#;

/// Which word tokens an expiry removes: those seen in fewer than `count`
/// messages (ham and spam together) whose counts last changed before day
/// `before`, those seen in exactly `count` whose counts last changed
/// before day `edge_before` (days since 1970), and at most `last.1` of
/// those seen in exactly `count` last changed on day `last.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    count: u64,
    before: u32,
    edge_before: u32,
    last: Option<(u32, u64)>,
}

/// A count above any two 32-bit counts: what "no bound" is sent as (Lua
/// numbers are doubles).
const NO_BOUND: u64 = 1 << 34;

impl Expiry {
    /// Tokens seen in at most `max_count` messages whose counts last
    /// changed before day `before`: `prune`'s rule.
    pub fn rare_and_old(max_count: u64, before: u32) -> Expiry {
        Expiry {
            count: max_count.saturating_add(1).min(NO_BOUND),
            before,
            edge_before: 0,
            last: None,
        }
    }

    /// Tokens before (`count`, `day`) in the order of the cap (fewest
    /// messages first and, among those seen as often, the oldest first),
    /// and at most `limit` of those at (`count`, `day`).
    fn up_to(count: u64, day: u32, limit: u64) -> Expiry {
        Expiry {
            count: count.min(NO_BOUND),
            before: u32::MAX,
            edge_before: day,
            last: Some((day, limit)),
        }
    }

    /// Whether the rule removes a token of `counts` last changed on `day`,
    /// leaving aside the limit of the last group.
    fn removes(&self, counts: TokenCounts, day: u32) -> bool {
        let n = u64::from(counts.ham) + u64::from(counts.spam);
        (n < self.count && day < self.before)
            || (n == self.count && (day < self.edge_before || Some(day) == self.last.map(|l| l.0)))
    }

    /// Whether a token of `counts` last changed on `day` is one of the
    /// last group's.
    fn in_last(&self, counts: TokenCounts, day: u32) -> bool {
        let n = u64::from(counts.ham) + u64::from(counts.spam);
        n == self.count && Some(day) == self.last.map(|l| l.0)
    }
}

/// What [`RedisStore::cap`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capped {
    /// Word tokens removed.
    pub removed: u64,
    /// The model's memory before, in bytes.
    pub before: u64,
    /// ... and after.
    pub after: u64,
}

/// Milliseconds the lock of a cap is held at most, should its host die.
const LOCK_MS: u64 = 600_000;

/// Removes the lock KEYS[1] if it is still ARGV[1]'s.
const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Rounds of removal a cap makes at most: each measures again, as a
/// removed token frees a little less than the mean a token takes (the
/// hash's table keeps its size).
const ROUNDS: usize = 4;

impl RedisStore {
    /// Stamps changes with `day` (days since 1970) instead of today: for
    /// tests of expiry.
    pub fn set_today(&mut self, day: u32) {
        self.today = Some(day);
    }

    /// The day changes are stamped with.
    pub(super) fn today(&self) -> u32 {
        self.today.unwrap_or_else(crate::store::sled::today)
    }

    /// Removes the word tokens `rule` removes; every other count stays
    /// exactly as it was. Returns how many were removed.
    pub fn expire(&self, rule: Expiry) -> Result<u64> {
        let mut removed = 0;
        let mut last_left = rule.last.map_or(0, |l| l.1);
        let words = self.keys.words.clone();
        self.scan_pages(&words, &mut |page| {
            let mut chosen = Vec::new();
            for (field, value) in page {
                let (counts, day) = self.decode(&String::from_utf8_lossy(&field), &value, true)?;
                if !rule.removes(counts, day) {
                    continue;
                }
                if rule.in_last(counts, day) {
                    if last_left == 0 {
                        continue;
                    }
                    last_left -= 1;
                }
                chosen.push(field);
            }
            if !chosen.is_empty() {
                removed += self.remove(rule, &chosen)?;
            }
            Ok(())
        })?;
        Ok(removed)
    }

    /// Runs the expiry script on `fields`.
    fn remove(&self, rule: Expiry, fields: &[Vec<u8>]) -> Result<u64> {
        let mut invocation = self.expire.prepare_invoke();
        invocation
            .key(&self.keys.meta)
            .key(&self.keys.words)
            .arg(rule.count)
            .arg(rule.before)
            .arg(rule.edge_before)
            .arg(rule.last.map_or(-1, |l| i64::from(l.0)));
        for f in fields {
            invocation.arg(&f[..]);
        }
        self.redis.with(&self.shown, |con| invocation.invoke(con))
    }

    /// Keeps the model's memory (as [`RedisStore::memory`] estimates it)
    /// at most `max` bytes: when it is above, removes word tokens in the
    /// order of fewest messages first and, among those seen as often, the
    /// oldest first, until the words take at most nine tenths of what the
    /// cap leaves them beside the rest (so that a model near its cap is
    /// not trimmed at every check). A cap below what the model takes
    /// beyond its word tokens is an error, and nothing is removed. None if
    /// another host is capping the model.
    pub fn cap(&self, max: u64) -> Result<Option<Capped>> {
        // Within the cap (what nearly every check finds): nothing written.
        let now = self.memory(false)?.total();
        if now <= max {
            return Ok(Some(Capped {
                removed: 0,
                before: now,
                after: now,
            }));
        }
        let token = format!(
            "{}.{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let locked: Result<Option<String>> = self.query(
            redis::cmd("SET")
                .arg(&self.keys.lock)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(LOCK_MS),
        );
        let held = match locked {
            Ok(Some(_)) => true,
            Ok(None) => {
                // A SET that landed but whose answer was lost is tried
                // again on a new connection and finds its own lock.
                let holder: Option<String> = self.query(redis::cmd("GET").arg(&self.keys.lock))?;
                if holder.as_deref() != Some(token.as_str()) {
                    return Ok(None);
                }
                true
            }
            // A Redis full to its `maxmemory` (noeviction) refuses even the
            // lock's one small key, and removing words is what frees it:
            // that runs without the lock (hosts trimming at once may each
            // remove what the cap asks, so more goes than one would take;
            // never a count in use).
            Err(e) if out_of_memory(&e) => false,
            Err(e) => return Err(e),
        };
        let capped = self.capped(max);
        let unlocked = if held {
            let unlock = Script::new(UNLOCK);
            self.redis
                .with(&self.shown, |con| {
                    unlock.key(&self.keys.lock).arg(&token).invoke::<i64>(con)
                })
                .map(|_| ())
        } else {
            Ok(())
        };
        let capped = capped?;
        unlocked?;
        Ok(Some(capped))
    }

    /// [`RedisStore::cap`], the lock held (or refused for want of memory).
    fn capped(&self, max: u64) -> Result<Capped> {
        let mut memory = self.memory(false)?;
        let before = memory.total();
        let mut removed = 0;
        for _ in 0..ROUNDS {
            let total = memory.total();
            if total <= max && removed == 0 {
                break;
            }
            let rest = total - memory.words;
            if rest >= max {
                return Err(Error::Invalid(format!(
                    "{}: a cap of {max} bytes is below what the model takes beyond its word \
                     tokens ({rest} bytes: the registry of learned messages, the byte view and \
                     the totals); raise it",
                    self.shown
                )));
            }
            let target = max - (max - rest) / 10;
            if total <= target {
                break;
            }
            let words: u64 = self.query(redis::cmd("HLEN").arg(&self.keys.words))?;
            if words == 0 {
                break;
            }
            let per_word = (memory.words / words).max(1);
            let wanted = (total - target).div_ceil(per_word);
            let Some(rule) = self.cut(wanted)? else {
                break;
            };
            removed += self.expire(rule)?;
            memory = self.memory(false)?;
        }
        Ok(Capped {
            removed,
            before,
            after: memory.total(),
        })
    }

    /// The rule that removes the first `wanted` word tokens in the order
    /// of the cap (all if there are fewer); None if there is none.
    fn cut(&self, wanted: u64) -> Result<Option<Expiry>> {
        let mut histogram: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        let words = self.keys.words.clone();
        self.scan_pages(&words, &mut |page| {
            for (field, value) in page {
                let (counts, day) = self.decode(&String::from_utf8_lossy(&field), &value, true)?;
                let n = u64::from(counts.ham) + u64::from(counts.spam);
                *histogram.entry((n, day)).or_default() += 1;
            }
            Ok(())
        })?;
        let mut seen = 0;
        let mut last = None;
        for ((count, day), n) in histogram {
            last = Some(Expiry::up_to(count, day, n.min(wanted - seen)));
            seen += n;
            if seen >= wanted {
                break;
            }
        }
        Ok(last)
    }
}

/// Whether Redis refused a command for want of memory (`OOM`, a full
/// `maxmemory` under noeviction).
fn out_of_memory(err: &Error) -> bool {
    matches!(err, Error::Redis { source, .. }
        if source
            .downcast_ref::<redis::RedisError>()
            .is_some_and(|e| e.code() == Some("OOM")))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::model::Label;
    use crate::store::redis::RedisUrl;
    use crate::store::testkit::*;
    use crate::store::{SledStore, Store};
    use crate::vocab::Feature;

    const WAIT: Duration = Duration::from_secs(5);

    fn open(server: &RedisServer, prefix: &str) -> RedisStore {
        let url = RedisUrl::parse(&server.url(&format!("/0?prefix={prefix}"))).unwrap();
        RedisStore::open(&url, None, WAIT).unwrap()
    }

    fn generation(store: &RedisStore) -> u64 {
        store.totals_at().unwrap().1
    }

    /// `prune`'s rule is one rule: over random learning on random days,
    /// expiry in Redis removes exactly the words sled's `rare_and_old`
    /// names, and every other count, the totals and the registry stay.
    #[test]
    fn expiry_removes_what_prune_removes_in_sled_and_nothing_else() {
        let server = RedisServer::start();
        let case = std::cell::Cell::new(0);
        let days = prop::collection::vec((delta_strategy(), 0u32..3), 1..12);
        proptest!(ProptestConfig::with_cases(24), |(steps in days, max_count in 0u64..4, before in 0u32..4)| {
            case.set(case.get() + 1);
            let mut redis = open(&server, &format!("p{}", case.get()));
            let dir = tempfile::tempdir().unwrap();
            let mut sled = SledStore::open(&dir.path().join("db"), WAIT).unwrap();
            for (delta, day) in &steps {
                redis.set_today(100 + day);
                sled.set_today(100 + day);
                // A refused delta (an overflow) is refused by both.
                prop_assert_eq!(redis.apply(delta).is_ok(), sled.apply(delta).is_ok());
            }
            let pruned = sled.rare_and_old(max_count, 100 + before).unwrap();
            let before_gen = generation(&redis);
            let removed = redis.expire(Expiry::rare_and_old(max_count, 100 + before)).unwrap();
            prop_assert_eq!(removed, pruned.words.len() as u64);
            prop_assert_eq!(generation(&redis) > before_gen, removed > 0);
            sled.apply(&pruned).unwrap();
            prop_assert_eq!(dump(&redis), dump(&sled));
        });
    }

    #[test]
    fn a_word_learned_after_it_was_chosen_stays() {
        let server = RedisServer::start();
        let mut store = open(&server, "meanwhile");
        store.set_today(100);
        store
            .apply(&message(&["e", "f"], Label::Spam, 1, 1, 0))
            .unwrap();
        let rule = Expiry::rare_and_old(1, 150);
        // Chosen while seen once on day 100, then learned again (seen
        // twice, today): the script leaves it and removes "f".
        store.set_today(200);
        store.apply(&message(&["e"], Label::Ham, 1, 2, 0)).unwrap();
        let removed = store.remove(rule, &[b"e".to_vec(), b"f".to_vec()]).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(
            store.token(Feature::Word("e")).unwrap(),
            TokenCounts { ham: 1, spam: 1 }
        );
        assert_eq!(
            store.token(Feature::Word("f")).unwrap(),
            TokenCounts::default()
        );
        assert_eq!(store.token_count().unwrap(), 1);
    }

    fn words(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:05}")).collect()
    }

    fn learn(store: &mut RedisStore, words: &[String], day: u32, digest: u8) {
        store.set_today(day);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        store
            .apply(&message(&words, Label::Spam, 1, digest, 0))
            .unwrap();
    }

    fn present(store: &RedisStore, words: &[String]) -> usize {
        words
            .iter()
            .filter(|w| store.token(Feature::Word(w)).unwrap() != TokenCounts::default())
            .count()
    }

    #[test]
    fn a_cap_removes_the_least_seen_and_oldest_words_first_until_the_model_fits() {
        let server = RedisServer::start();
        let mut store = open(&server, "cap");
        let old_once = words("old", 3000);
        let new_once = words("new", 3000);
        let often = words("often", 3000);
        learn(&mut store, &old_once, 100, 1);
        learn(&mut store, &new_once, 200, 2);
        for digest in 3..6 {
            learn(&mut store, &often, 100, digest);
        }
        let full = store.memory(false).unwrap().total();
        let before = dump(&store);

        // A cap above the model's memory removes nothing.
        let same = store.cap(full + full / 2).unwrap().unwrap();
        assert_eq!(same.removed, 0);

        // A cap below what the registry, buckets and totals take alone is
        // refused, and nothing is removed.
        let err = store.cap(100).unwrap_err().to_string();
        assert!(err.contains("below what the model takes"), "{err}");
        assert_eq!(dump(&store), before);

        // Two thirds of its memory: the words seen once go, the oldest
        // first, and those seen three times stay.
        let max = full * 2 / 3;
        // Another host capping it: this one leaves it.
        let other = open(&server, "cap");
        let lock: String = other
            .query(redis::cmd("SET").arg(&other.keys.lock).arg("other"))
            .unwrap();
        assert_eq!(lock, "OK");
        assert_eq!(store.cap(max).unwrap(), None);
        let _: () = other
            .query(redis::cmd("DEL").arg(&other.keys.lock))
            .unwrap();
        let capped = store.cap(max).unwrap().unwrap();
        let lock: Option<String> = store
            .query(redis::cmd("GET").arg(&store.keys.lock))
            .unwrap();
        assert_eq!(lock, None, "the cap's lock is left");
        assert!(capped.after <= max, "{capped:?} over {max}");
        assert!(capped.removed > 0);
        assert_eq!(store.memory(false).unwrap().total(), capped.after);
        let (old_left, new_left) = (present(&store, &old_once), present(&store, &new_once));
        assert_eq!(old_left, 0, "the old words seen once go first");
        assert!(new_left > 0, "too much removed: {capped:?}");
        assert_eq!(present(&store, &often), often.len());
        assert_eq!(capped.removed as usize, 6000 - new_left);
        let after = dump(&store);
        assert_eq!(after.totals, before.totals);
        assert_eq!(after.labels, before.labels);
        assert_eq!(after.token_count, before.token_count - capped.removed);
    }

    /// A Redis full to its `maxmemory` under noeviction refuses every
    /// write, the cap's lock included; the cap still frees it. Before, it
    /// failed on its lock, and the model stayed full until someone
    /// stepped in.
    #[test]
    fn a_cap_frees_a_redis_that_is_full() {
        let server = RedisServer::start();
        let mut store = open(&server, "full");
        learn(&mut store, &words("once", 6000), 100, 1);
        let full = store.memory(false).unwrap().total();
        let used = |store: &RedisStore| -> u64 {
            let info: String = store.query(redis::cmd("INFO").arg("memory")).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let _: () = store
            .query(
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("maxmemory-policy")
                    .arg("noeviction"),
            )
            .unwrap();
        // Below what it uses: full, whatever it frees meanwhile.
        let _: () = store
            .query(
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("maxmemory")
                    .arg(used(&store) / 2),
            )
            .unwrap();
        let refused =
            store.query::<()>(redis::cmd("SET").arg("{full}:probe").arg(vec![b'x'; 4096]));
        assert!(refused.unwrap_err().to_string().contains("OOM"));
        let capped = store.cap(full / 2).unwrap().unwrap();
        assert!(capped.removed > 0, "{capped:?}");
        assert!(capped.after <= full / 2, "{capped:?}");
        let _: () = store
            .query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0))
            .unwrap();
    }
}
