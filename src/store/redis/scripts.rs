//! The Lua scripts that change a model and read what a change is computed
//! from: each is one command, so what it reads and writes is read and
//! written at one moment: a message's counts, its registry label and its
//! prequential sample change together.

/// Applies one change. KEYS: meta, words, grams, registry, samples. ARGV:
/// the generation the totals were read at, the new totals, the day changed
/// words are stamped with, the new prequential record or "" (unchanged),
/// the new header or "" (unchanged), the new record's version (a hash of
/// it, so that a version seen again is that record); then for words, then for buckets, the
/// number of groups of changes and for each group Δham, Δspam, the number
/// of fields and the fields; then (digest, label or "") for each registry
/// change. Returns `{-1, generation}` if the generation moved, `{-2,
/// field}` if a count would overflow (nothing written), else `{new
/// generation, inexact}`. Counts are read and written a few hundred
/// fields to a command (a command each would cost more than the rest).
pub(super) const APPLY: &str = r#"
local gen = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if gen ~= tonumber(ARGV[1]) then return {-1, gen} end
local MAX = 4294967295
local CHUNK = 500
local inexact = 0
local day = tonumber(ARGV[3])
local i = 7
local tokens = 0
local sets, dels = {{}, {}}, {{}, {}}
for v = 1, 2 do
  local groups = tonumber(ARGV[i]); i = i + 1
  for _ = 1, groups do
    local dh, ds, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local first, last = i + 3, i + 2 + n
    i = last + 1
    local c = first
    while c <= last do
      local e = math.min(c + CHUNK - 1, last)
      local olds = redis.call('HMGET', KEYS[v + 1], unpack(ARGV, c, e))
      for j = c, e do
        local old = olds[j - c + 1]
        local h, s = 0, 0
        if old then h, s = struct.unpack('<I4I4', old) end
        local nh, ns = h + dh, s + ds
        if nh < 0 then nh = 0; inexact = inexact + 1 end
        if ns < 0 then ns = 0; inexact = inexact + 1 end
        if nh > MAX or ns > MAX then return {-2, ARGV[j]} end
        if nh == 0 and ns == 0 then
          if old then
            dels[v][#dels[v] + 1] = ARGV[j]
            tokens = tokens - 1
          end
        else
          local value
          if v == 1 then value = struct.pack('<I4I4I4', nh, ns, day)
          else value = struct.pack('<I4I4', nh, ns) end
          local w = sets[v]
          w[#w + 1] = ARGV[j]
          w[#w + 1] = value
          if not old then tokens = tokens + 1 end
        end
      end
      c = e + 1
    end
  end
end
for v = 1, 2 do
  local w, d = sets[v], dels[v]
  local c = 1
  while c <= #w do
    local e = math.min(c + 2 * CHUNK - 1, #w)
    redis.call('HSET', KEYS[v + 1], unpack(w, c, e))
    c = e + 1
  end
  c = 1
  while c <= #d do
    local e = math.min(c + CHUNK - 1, #d)
    redis.call('HDEL', KEYS[v + 1], unpack(d, c, e))
    c = e + 1
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
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4])
  redis.call('HSET', KEYS[1], 'samples', ARGV[6])
end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'header', ARGV[5]) end
redis.call('HSET', KEYS[1], 'totals', ARGV[2], 'generation', gen + 1, 'format', '2')
redis.call('HINCRBY', KEYS[1], 'tokens', tokens)
return {gen + 1, inexact}
"#;

/// Reads what a change is computed from. KEYS: meta, registry, samples.
/// ARGV: the digest whose label is asked, or "" for none; "" if the
/// prequential record and the header are not asked, else the version of
/// the record the caller holds ("0" for none). Returns {totals,
/// generation, label, record, header, record version} (each nil when
/// absent or not asked; the record also when it is the version held).
pub(super) const READ: &str = r#"
local m = redis.call('HMGET', KEYS[1], 'totals', 'generation', 'header', 'samples')
local label, record, header, version = false, false, false, false
if ARGV[1] ~= '' then label = redis.call('HGET', KEYS[2], ARGV[1]) end
if ARGV[2] ~= '' then
  header = m[3]
  version = m[4] or '0'
  if version ~= ARGV[2] then record = redis.call('GET', KEYS[3]) end
end
return {m[1], m[2], label, record, header, version}
"#;
