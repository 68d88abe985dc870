//! The Lua scripts that change a model and read what a change is computed
//! from: each is one command, so what it reads and writes is read and
//! written at one moment: a message's counts, its registry label and its
//! prequential sample change together.

/// Applies one change. KEYS: meta, words, grams, registry, samples. ARGV:
/// the generation the totals were read at, the new totals, the day changed
/// words are stamped with, the new prequential record or "" (unchanged),
/// the new header or "" (unchanged), the number of word changes, then (word, Δham, Δspam) for each, the number of bucket
/// changes, (bucket, Δham, Δspam) for each, then (digest, label or "")
/// for each registry change. Returns `{-1, generation}` if the generation
/// moved, `{-2, field}` if a count would overflow (nothing written), else
/// `{new generation, inexact}`.
pub(super) const APPLY: &str = r#"
local gen = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if gen ~= tonumber(ARGV[1]) then return {-1, gen} end
local MAX = 4294967295
local inexact = 0
local writes = {}
local day = tonumber(ARGV[3])
local i = 6
for k = 2, 3 do
  local n = tonumber(ARGV[i]); i = i + 1
  for _ = 1, n do
    local field, dh, ds = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    i = i + 3
    local old = redis.call('HGET', KEYS[k], field)
    local h, s = 0, 0
    if old then h, s = struct.unpack('<I4I4', old) end
    local nh, ns = h + dh, s + ds
    if nh < 0 then nh = 0; inexact = inexact + 1 end
    if ns < 0 then ns = 0; inexact = inexact + 1 end
    if nh > MAX or ns > MAX then return {-2, field} end
    writes[#writes + 1] = {k, field, nh, ns, old ~= false}
  end
end
local tokens = 0
for _, w in ipairs(writes) do
  if w[3] == 0 and w[4] == 0 then
    if w[5] then redis.call('HDEL', KEYS[w[1]], w[2]); tokens = tokens - 1 end
  else
    local value
    if w[1] == 2 then value = struct.pack('<I4I4I4', w[3], w[4], day)
    else value = struct.pack('<I4I4', w[3], w[4]) end
    redis.call('HSET', KEYS[w[1]], w[2], value)
    if not w[5] then tokens = tokens + 1 end
  end
end
while i <= #ARGV do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[4], ARGV[i])
  else
    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  end
  i = i + 2
end
if ARGV[4] ~= '' then redis.call('SET', KEYS[5], ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'header', ARGV[5]) end
redis.call('HSET', KEYS[1], 'totals', ARGV[2], 'generation', gen + 1, 'format', '2')
redis.call('HINCRBY', KEYS[1], 'tokens', tokens)
return {gen + 1, inexact}
"#;

/// Reads what a change is computed from. KEYS: meta, registry, samples.
/// ARGV: the digest whose label is asked, or "" for none; "1" if the
/// prequential record and the header are asked, else "". Returns {totals,
/// generation, label, record, header} (each nil when absent or not
/// asked).
pub(super) const READ: &str = r#"
local m = redis.call('HMGET', KEYS[1], 'totals', 'generation', 'header')
local label, record, header = false, false, false
if ARGV[1] ~= '' then label = redis.call('HGET', KEYS[2], ARGV[1]) end
if ARGV[2] == '1' then
  record = redis.call('GET', KEYS[3])
  header = m[3]
end
return {m[1], m[2], label, record, header}
"#;
