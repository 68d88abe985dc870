//! `bayesmail serve --store redis://…`: several servers on one real
//! `redis-server` judge with one set of counts. Messages learned through
//! any of them at once are counted once, and every server then judges as
//! one local database taught the same messages; when Redis is gone, a
//! message gets no verdict (`store-unavailable`) and learning fails, both
//! at once, and both resume when Redis is back.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::redis_server::RedisServer;
use crate::common::{Db, assert_exit, json_lines, root, sample_ham, sample_spam, stderr, utf8};
use crate::serve_http::{Server, post};

/// A connection to the Redis at `url`, for a test to set it up.
fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// `CONFIG SET key value` on `con`.
fn config_set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query(con)
        .unwrap();
}

/// `train` of the sample corpus (`spam`, `ham`) into the Redis at `url`.
fn train_sample<'a>(
    url: &'a str,
    spam: &'a std::path::Path,
    ham: &'a std::path::Path,
) -> [&'a str; 7] {
    [
        "--store",
        url,
        "train",
        "--spam",
        utf8(spam),
        "--ham",
        utf8(ham),
    ]
}

/// The messages in `dir`, sorted.
fn files(dir: PathBuf) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "eml"))
        .collect();
    out.sort();
    out
}

#[test]
fn four_servers_on_one_redis_learn_at_once_and_judge_as_one_local_database() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=fleet");
    let db = Db::new();
    let servers: Vec<Server> = (0..4)
        .map(|_| Server::start(&db, &["--store", &url]))
        .collect();
    // Fifty messages: fewer than twenty spam, so that the local database
    // keeps the stacker it starts with (as the Redis model does).
    let scripts = root().join("corpora").join("scripts");
    let mut taught: Vec<(PathBuf, &str)> = files(sample_spam())
        .into_iter()
        .take(15)
        .map(|p| (p, "spam"))
        .collect();
    taught.extend(files(sample_ham()).into_iter().map(|p| (p, "ham")));
    taught.extend(
        files(scripts.join("train").join("ham"))
            .into_iter()
            .take(50 - taught.len())
            .map(|p| (p, "ham")),
    );
    assert_eq!(taught.len(), 50);
    // Each message through two servers at once.
    std::thread::scope(|scope| {
        for (k, server) in servers.iter().enumerate() {
            let taught = &taught;
            scope.spawn(move || {
                for (i, (path, class)) in taught.iter().enumerate() {
                    if i % 4 == k || (i + 1) % 4 == k {
                        let (code, answer) =
                            post(&server.url(&format!("/learn?class={class}")), path, &[]);
                        assert_eq!(code, 200, "{answer}");
                    }
                }
            });
        }
    });

    let local = Db::new();
    for (path, class) in &taught {
        local.ok(&["learn", &format!("--{class}"), utf8(path)], None);
    }
    let judged: Vec<PathBuf> = ["ham", "spam"]
        .iter()
        .flat_map(|l| files(scripts.join("test").join(l)))
        .chain(files(sample_spam()).into_iter().skip(15))
        .collect();
    let mut args = vec!["classify", "--json"];
    args.extend(judged.iter().map(|p| utf8(p)));
    let want = json_lines(&local.ok(&args, None));
    assert_eq!(want.len(), judged.len());
    let mut verdicts = std::collections::BTreeSet::new();
    for server in &servers {
        for (path, want) in judged.iter().zip(&want) {
            let (code, got) = post(&server.url("/check"), path, &[]);
            assert_eq!(code, 200, "{got}");
            assert_eq!(
                got["verdict"],
                want["verdict"],
                "{}: {got} {want}",
                path.display()
            );
            assert_eq!(
                got["reason"],
                want.get("reason").cloned().unwrap_or_default()
            );
            let (g, w) = (
                got["log_odds"].as_f64().unwrap(),
                want["log_odds"].as_f64().unwrap(),
            );
            assert!((g - w).abs() < 1e-9, "{}: {g} against {w}", path.display());
            verdicts.insert(got["verdict"].as_str().unwrap().to_string());
        }
    }
    assert!(verdicts.len() >= 2, "all one verdict: {verdicts:?}");
}

#[test]
fn with_redis_gone_a_message_gets_no_verdict_at_once_and_all_resumes_when_it_is_back() {
    let mut redis = RedisServer::start();
    let url = redis.url("/0");
    let db = Db::new();
    let server = Server::start(&db, &["--store", &url, "--store-timeout", "300"]);
    let message = &files(sample_spam())[0];
    let (code, answer) = post(&server.url("/learn?class=spam"), message, &[]);
    assert_eq!((code, answer["action"].as_str()), (200, Some("learned")));

    redis.kill();
    let started = Instant::now();
    let (code, answer) = post(&server.url("/check"), message, &[]);
    assert_eq!(code, 503, "{answer}");
    assert_eq!(answer["reason"], "store-unavailable");
    let status = answer["fields"][0][1].as_str().unwrap();
    assert!(
        status.starts_with("Unknown, reason=store-unavailable,"),
        "{status}"
    );
    let (code, answer) = post(&server.url("/learn?class=ham"), message, &[]);
    assert_eq!(
        (code, answer["reason"].as_str()),
        (503, Some("store-unavailable")),
        "{answer}"
    );
    // Both answered within a few timeouts, not a client's patience.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Back (empty: this Redis persists nothing): it answers (no model
    // yet), and learning works.
    redis.restart();
    let (code, answer) = post(&server.url("/check"), message, &[]);
    assert_eq!(
        (code, answer["reason"].as_str()),
        (503, Some("no-model")),
        "{answer}"
    );
    let (code, answer) = post(&server.url("/learn?class=spam"), message, &[]);
    assert_eq!((code, answer["action"].as_str()), (200, Some("learned")));
}

#[test]
fn a_users_messages_teach_the_users_model_on_every_server_and_no_one_elses() {
    let redis = RedisServer::start();
    let url = redis.url("/3?prefix=mail");
    let db = Db::new();
    let args = ["--store", &url, "--min-user-messages", "10"];
    let (a, b) = (Server::start(&db, &args), Server::start(&db, &args));
    let alice = "User: alice@example.org";
    for (dir, class) in [(sample_spam(), "spam"), (sample_ham(), "ham")] {
        for path in files(dir).iter().take(12) {
            let (code, answer) = post(&a.url(&format!("/learn?class={class}")), path, &[alice]);
            assert_eq!(code, 200, "{answer}");
            assert_eq!(answer["database"], "user:alice@example.org");
        }
    }
    let probe = &files(sample_spam())[20];
    let (_, answer) = post(&b.url("/check"), probe, &[alice]);
    assert_eq!(answer["model"], "user:alice@example.org", "{answer}");
    // Bob, and a request naming no one, have the empty global model: no
    // model yet.
    for headers in [&["User: bob@example.org"][..], &[]] {
        let (code, answer) = post(&b.url("/check"), probe, headers);
        assert_eq!(code, 503, "{answer}");
        assert_eq!(answer["reason"], "no-model", "{answer}");
    }
    // A name that could reach another key is refused, and nothing read.
    let (code, answer) = post(&a.url("/learn?class=spam"), probe, &["User: a}b"]);
    assert_eq!(
        (code, answer["reason"].as_str()),
        (400, Some("bad-user")),
        "{answer}"
    );
}

#[test]
fn train_learn_unlearn_and_stats_work_on_the_counts_in_redis_and_other_commands_say_they_cannot() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=cli");
    let db = Db::new();
    let (spam, ham) = (sample_spam(), sample_ham());
    let train = train_sample(&url, &spam, &ham);
    let out = db.run(&train, None);
    assert_exit(&out, 0, &train);
    assert!(
        stderr(&out).contains(&format!("store {url}: 24 ham, 24 spam")),
        "{}",
        stderr(&out)
    );
    // Again: nothing new.
    let out = db.run(&train, None);
    assert!(stderr(&out).contains("0 learned, 0 moved to the other label, 48 already known"));
    let stats: serde_json::Value =
        serde_json::from_str(&db.ok(&["--store", &url, "stats", "--json"], None)).unwrap();
    assert_eq!(
        (
            stats["ham_messages"].as_u64(),
            stats["spam_messages"].as_u64()
        ),
        (Some(24), Some(24))
    );
    assert_eq!(stats["registry"], 48);
    assert!(stats["memory_bytes"].as_u64().unwrap() > 0);
    // No directory was written.
    assert!(!db.dir().exists(), "a database directory was made");

    let message = files(
        root()
            .join("corpora")
            .join("scripts")
            .join("test")
            .join("ham"),
    )[0]
    .clone();
    let learn = |class: &str| db.ok(&["--store", &url, "learn", class, utf8(&message)], None);
    assert_eq!(learn("--ham").trim(), "learned as ham");
    assert_eq!(learn("--ham").trim(), "already learned as ham");
    assert_eq!(learn("--spam").trim(), "moved to spam");
    let unlearn = db.ok(&["--store", &url, "unlearn", utf8(&message)], None);
    assert_eq!(unlearn.trim(), "unlearned (was spam)");
    let again = db.run(&["--store", &url, "unlearn", utf8(&message)], None);
    assert_ne!(again.status.code(), Some(0));

    for command in [
        &["classify", utf8(&message)][..],
        &["explain", utf8(&message)],
    ] {
        let mut args = vec!["--store", url.as_str()];
        args.extend_from_slice(command);
        let out = db.run(&args, None);
        assert_exit(&out, 2, &args);
        assert!(
            stderr(&out).contains("works on a database directory (--db) only"),
            "{}",
            stderr(&out)
        );
    }
}

/// `stats --json`'s stacker: (messages it was fitted on, each view's weight).
fn stacker(db: &Db, args: &[&str]) -> (u64, Vec<(String, f64)>) {
    let mut all = args.to_vec();
    all.extend(["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&db.ok(&all, None)).unwrap();
    let mut weights: Vec<(String, f64)> = stats["weights"]
        .as_object()
        .unwrap_or_else(|| panic!("weights: {stats}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    (stats["calibrated_on"].as_u64().unwrap(), weights)
}

#[test]
fn a_model_in_redis_built_only_by_learn_fits_its_stacker_as_a_database_does() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=young");
    let (shared, local) = (Db::new(), Db::new());
    let store = ["--store", url.as_str()];
    let (spam, ham) = (files(sample_spam()), files(sample_ham()));
    let both = |args: &[&str]| {
        shared.ok(&[&store[..], args].concat(), None);
        local.ok(args, None);
    };
    // The same scores before each learn, the same rule: the same stacker.
    let same = || {
        let (fitted, in_redis) = (stacker(&local, &[]), stacker(&shared, &store));
        assert_eq!(in_redis.0, fitted.0, "fitted on");
        for ((view, w), (_, expected)) in in_redis.1.iter().zip(&fitted.1) {
            assert!(
                (w - expected).abs() < 1e-9,
                "{view}: {w} against {expected}"
            );
        }
        fitted
    };
    for (s, h) in spam.iter().zip(&ham) {
        both(&["learn", "--spam", utf8(s)]);
        both(&["learn", "--ham", utf8(h)]);
    }
    let first = same();
    assert!(first.0 > 0, "the database never refitted");
    // A move and an unlearn take the message's sample along, and the next
    // refits fit on what is left: both models keep agreeing.
    both(&["learn", "--ham", utf8(&spam[3])]);
    both(&["unlearn", utf8(&ham[5])]);
    let more = root().join("corpora").join("scripts").join("train");
    for (s, h) in files(more.join("spam"))
        .iter()
        .zip(files(more.join("ham")))
        .take(8)
    {
        both(&["learn", "--spam", utf8(s)]);
        both(&["learn", "--ham", utf8(&h)]);
    }
    let second = same();
    assert!(
        second.0 > first.0,
        "no refit after the move: {first:?} {second:?}"
    );
    let memory: serde_json::Value =
        serde_json::from_str(&shared.ok(&[&store[..], &["stats", "--json"]].concat(), None))
            .unwrap();
    assert!(memory["memory_parts"]["samples"].as_u64().unwrap() > 0);
}

/// The X-Spam-Status field `filter` gives `message` with `args` before it.
fn filter_status(db: &Db, args: &[&str], message: &std::path::Path) -> String {
    let raw = std::fs::read(message).unwrap();
    let mut all = args.to_vec();
    all.push("filter");
    let out = db.run(&all, Some(&raw));
    assert_exit(&out, 0, &all);
    // Our fields go on top; the message follows unchanged.
    assert!(out.stdout.ends_with(&raw), "the message was altered");
    let text = String::from_utf8_lossy(&out.stdout[..out.stdout.len() - raw.len()]).into_owned();
    text.lines()
        .find(|l| l.starts_with("X-Spam-Status:"))
        .unwrap_or_else(|| panic!("no X-Spam-Status: {text}"))
        .to_string()
}

#[test]
fn filter_judges_with_the_model_in_redis_as_with_the_same_model_in_a_directory() {
    let redis = RedisServer::start();
    let url = redis.url("/2?prefix=deliver");
    let (shared, local) = (Db::new(), Db::new());
    let (spam, ham) = (sample_spam(), sample_ham());
    let train = ["train", "--spam", utf8(&spam), "--ham", utf8(&ham)];
    shared.ok(&[&["--store", &url][..], &train].concat(), None);
    local.ok(&train, None);
    let tests = root().join("corpora").join("scripts").join("test");
    let messages: Vec<PathBuf> = files(tests.join("ham"))
        .into_iter()
        .chain(files(tests.join("spam")))
        .collect();
    for message in &messages {
        assert_eq!(
            filter_status(&shared, &["--store", &url], message),
            filter_status(&local, &[], message),
            "{}",
            message.display()
        );
    }
    assert!(!shared.dir().exists(), "a database directory was made");

    // Redis hanging (stopped: connections open, no answer), then gone:
    // the message goes out unchanged with no verdict, and judging resumes
    // when Redis answers again.
    let probe = &messages[0];
    let quick = ["--store", url.as_str(), "--store-timeout", "200"];
    let judged = filter_status(&shared, &quick, probe);
    redis.pause();
    let hung = filter_status(&shared, &quick, probe);
    redis.resume();
    assert!(
        hung.starts_with("X-Spam-Status: Unknown, reason=store-unavailable"),
        "{hung}"
    );
    assert_eq!(filter_status(&shared, &quick, probe), judged);
    let mut redis = redis;
    redis.kill();
    let gone = filter_status(&shared, &quick, probe);
    assert!(
        gone.starts_with("X-Spam-Status: Unknown, reason=store-unavailable"),
        "{gone}"
    );
}

/// `stats --json`'s (features, memory_bytes, memory of the words) of a
/// model in Redis.
fn features_and_memory(db: &Db, url: &str, user: Option<&str>) -> (u64, u64, u64) {
    let mut args = vec!["--store", url, "stats", "--json"];
    if let Some(user) = user {
        args.extend(["--user", user]);
    }
    let stats: serde_json::Value = serde_json::from_str(&db.ok(&args, None)).unwrap();
    (
        stats["features"].as_u64().unwrap(),
        stats["memory_bytes"].as_u64().unwrap(),
        stats["memory_parts"]["words"].as_u64().unwrap(),
    )
}

#[test]
fn prune_and_the_memory_cap_keep_the_models_in_redis_small() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=small");
    let db = Db::new();
    let (spam, ham) = (sample_spam(), sample_ham());
    db.ok(&train_sample(&url, &spam, &ham), None);
    // A user's model, learned through serve.
    {
        let server = Server::start(&db, &["--store", &url]);
        for path in files(sample_spam()).iter().take(5) {
            let (code, answer) = post(&server.url("/learn?class=spam"), path, &["User: carol"]);
            assert_eq!(code, 200, "{answer}");
        }
    }
    let (features, memory, _) = features_and_memory(&db, &url, None);
    let carol = features_and_memory(&db, &url, Some("carol"));
    // The command line names users as serve does, without case.
    assert_eq!(features_and_memory(&db, &url, Some("Carol")), carol);

    // prune's rule on the global model: words seen once (every word was
    // learned today, so --min-age 0) go, and only they.
    let out = db.run(&["--store", &url, "prune", "--min-age", "0"], None);
    assert_exit(&out, 0, &["prune"]);
    let line = stderr(&out);
    let removed: u64 = line
        .split("pruned ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(removed > 0, "{line}");
    let (pruned_features, pruned_memory, words_bytes) = features_and_memory(&db, &url, None);
    assert_eq!(pruned_features, features - removed);
    assert!(pruned_memory < memory);
    assert_eq!(features_and_memory(&db, &url, Some("carol")).0, carol.0);
    // The default age keeps words learned today.
    let out = db.run(&["--store", &url, "prune", "--all-users"], None);
    assert!(stderr(&out).contains("pruned 0 tokens"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("user carol: pruned 0 tokens"),
        "{}",
        stderr(&out)
    );

    // A serve with a cap trims the global model at once; the user's,
    // under it, is left alone. The cap leaves room for about half the
    // words beside the byte view's buckets and the registry, which never
    // expire.
    let cap = pruned_memory - words_bytes / 2;
    assert!(carol.1 < cap);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).args([
        "--store",
        &url,
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store-max-memory",
        &cap.to_string(),
    ]);
    let (mut child, watch) = crate::common::spawn_watched(cmd);
    let line = watch.wait_for("to fit the cap", 60);
    let _ = child.kill();
    let _ = child.wait();
    let line = line.unwrap_or_else(|| panic!("serve trims the model: {}", watch.log()));
    assert!(line.contains("the global model: removed"), "{line}");
    assert!(!watch.log().contains("carol"), "{}", watch.log());
    let (capped_features, capped_memory, _) = features_and_memory(&db, &url, None);
    assert!(capped_memory <= cap, "{capped_memory} > {cap}");
    assert!(capped_features < pruned_features);
    assert_eq!(features_and_memory(&db, &url, Some("carol")), carol);

    // prune's cap says what it did; a cap below what the buckets and the
    // registry take is refused; a database directory has no cap.
    let out = db.run(
        &[
            "--store",
            &url,
            "prune",
            "--all-users",
            "--max-memory",
            "10M",
        ],
        None,
    );
    assert_exit(&out, 0, &["prune --max-memory"]);
    assert!(
        stderr(&out).contains("within the cap of 10.5 MB"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["--store", &url, "prune", "--max-memory", "1000"], None);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("is below what the model takes"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["prune", "--max-memory", "10M"], None);
    assert_exit(&out, 2, &["prune --max-memory on a directory"]);
    // A cap with no Redis to cap is refused, not ignored.
    let args = [
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store-max-memory",
        "10M",
    ];
    let out = db.run(&args, None);
    assert_exit(&out, 2, &args);
    assert!(
        stderr(&out).contains("it needs --store"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_readmes_several_servers_lines_run_as_printed() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = &readme[readme.find("### Several servers").expect("the section")..];
    let section = &section[..section[4..].find("\n### ").unwrap() + 4];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block");
    let redis = RedisServer::start();
    let url = redis.url("/0");
    let address = url.trim_start_matches("redis://").trim_end_matches("/0");
    let db = Db::new();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string()
    };
    let (spam, ham) = (
        utf8(&sample_spam()).to_string(),
        utf8(&sample_ham()).to_string(),
    );
    let mut ran = 0;
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        // Only the address of Redis, the folders and the ports change.
        let line = line
            .replace("127.0.0.1:6379", address)
            .replace("spam-folder/", &spam)
            .replace("ham-folder/", &ham)
            .replace("127.0.0.1:11333", &free())
            .replace("127.0.0.1:11340", &free());
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "bayesmail", "{line}");
        if words.contains(&"serve") {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"));
            cmd.args(&words[1..]);
            let (mut child, watch) = crate::common::spawn_watched(cmd);
            let bound = watch.listening(2, 60);
            let _ = child.kill();
            let _ = child.wait();
            assert!(bound.is_some(), "{line}: {}", watch.log());
        } else {
            let out = db.run(&words[1..], None);
            assert_exit(&out, 0, &words);
            let text = String::from_utf8_lossy(&out.stdout);
            if words.contains(&"stats") {
                assert!(
                    text.contains(&format!("store               {url}")),
                    "{text}"
                );
                let alice = words.contains(&"--user");
                assert_eq!(
                    text.contains("messages learned    0 ham, 0 spam"),
                    alice,
                    "{text}"
                );
            }
        }
        ran += 1;
    }
    assert_eq!(ran, 4);
}

/// `stats --json` of the model at `url`: ham, spam, features, registry.
fn counts_at(db: &Db, url: &str) -> [u64; 4] {
    let stats: serde_json::Value =
        serde_json::from_str(&db.ok(&["--store", url, "stats", "--json"], None)).unwrap();
    ["ham_messages", "spam_messages", "features", "registry"].map(|k| stats[k].as_u64().unwrap())
}

/// Starts `train --store url` on the public corpus's spam-1 and hard-ham-1
/// and kills it (`kill -9`), or lets `during` kill something else, once
/// it has learned something; returns its exit status.
fn train_killed(
    db: &Db,
    url: &str,
    during: impl FnOnce(&mut std::process::Child),
) -> std::process::ExitStatus {
    let corpus = crate::common::public_corpus().expect("the public corpus");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args(["--store", url, "train", "-q", "--no-logistic", "--spam"])
        .arg(corpus.join("spam-1"))
        .arg("--ham")
        .arg(corpus.join("hard-ham-1"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let [ham, spam, ..] = counts_at(db, url);
        if ham + spam > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "train learned nothing in 2 minutes"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "train ended before learning"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    during(&mut child);
    child.wait().unwrap()
}

#[test]
fn a_learner_or_redis_killed_mid_train_leaves_counts_a_rerun_completes_exactly() {
    if crate::common::public_corpus().is_none() {
        return;
    }
    let mut redis = RedisServer::start_persistent();
    let db = Db::new();
    let corpus = crate::common::public_corpus().unwrap();
    let train = |url: &str| {
        let (spam, ham) = (corpus.join("spam-1"), corpus.join("hard-ham-1"));
        let args = [
            "--store",
            url,
            "train",
            "-q",
            // The counts, which a rerun completes exactly. The online
            // discriminative view's weights are approximate by nature: each
            // stored message's step is stored with it, and the rerun steps
            // the rest from where the killed run left the weights.
            "--no-logistic",
            "--spam",
            utf8(&spam),
            "--ham",
            utf8(&ham),
        ];
        assert_exit(&db.run(&args, None), 0, &args);
    };
    let whole = redis.url("/0?prefix=whole");
    train(&whole);
    let want = counts_at(&db, &whole);

    // The learner killed.
    let learner = redis.url("/0?prefix=learner");
    let status = train_killed(&db, &learner, |child| child.kill().unwrap());
    assert!(!status.success());
    let [ham, spam, _, registry] = counts_at(&db, &learner);
    assert_eq!(ham + spam, registry, "every message counted is registered");
    assert!(registry < want[3], "killed before the end");
    train(&learner);
    assert_eq!(counts_at(&db, &learner), want);

    // Redis killed under the learner, then started again from its file.
    let crashed = redis.url("/0?prefix=crashed");
    let status = train_killed(&db, &crashed, |_| redis.kill());
    assert!(!status.success(), "train goes on without Redis");
    redis.restart();
    let [ham, spam, _, registry] = counts_at(&db, &crashed);
    assert_eq!(ham + spam, registry, "every message counted is registered");
    train(&crashed);
    assert_eq!(counts_at(&db, &crashed), want);
}

#[test]
fn the_readmes_configuration_reads_with_and_without_its_store_lines() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = &readme[readme.find("### Configuration").expect("the section")..];
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, block).unwrap();
    let config = bayesmail::config::Config::load(&file).unwrap();
    assert_eq!(config.store, None);
    assert_eq!(config.serve.store_cache_ms, Some(500));
    // The commented store lines, as an administrator would uncomment them.
    let uncommented = block
        .replace("# store = ", "store = ")
        .replace("# store_timeout = ", "store_timeout = ")
        .replace("# store_max_memory = ", "store_max_memory = ");
    std::fs::write(&file, uncommented).unwrap();
    let config = bayesmail::config::Config::load(&file).unwrap();
    assert_eq!(
        config.store.as_deref(),
        Some("redis://127.0.0.1:6379/0?prefix=bayesmail")
    );
    assert_eq!(config.store_timeout.map(u64::from), Some(1000));
    assert_eq!(
        config.serve.store_max_memory.map(|s| s.bytes()),
        Some(Ok(512 << 20))
    );
}

#[test]
fn a_fleets_training_run_steps_the_discriminative_view_as_a_directorys_does() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=steps");
    let db = Db::new();
    let (spam, ham) = (sample_spam(), sample_ham());
    let train = train_sample(&url, &spam, &ham);
    assert_exit(&db.run(&train, None), 0, &train);
    let local = Db::new();
    let args = ["train", "--spam", utf8(&spam), "--ham", utf8(&ham)];
    assert_exit(&local.run(&args, None), 0, &args);
    let weights = |args: &[&str], db: &Db| -> serde_json::Value {
        let stats: serde_json::Value = serde_json::from_str(&db.ok(args, None)).unwrap();
        stats["weights"].clone()
    };
    let fleet = weights(&["--store", &url, "stats", "--json"], &db);
    let directory = weights(&["stats", "--json"], &local);
    // The same sample stepped in the same order: the stacker fitted on
    // the same scores, the view's weight among them.
    assert!(fleet["logistic"].as_f64().unwrap() > 0.0, "{fleet}");
    for input in ["header", "body", "bytes", "metadata", "logistic"] {
        let (f, d) = (
            fleet[input].as_f64().unwrap(),
            directory[input].as_f64().unwrap(),
        );
        assert!((f - d).abs() < 1e-9, "{input}: {f} against {d}");
    }
    // Trained again, nothing steps: no change is written to Redis at all
    // (a step is written with its message), and the stacker stays.
    let stats = |db: &Db| -> serde_json::Value {
        serde_json::from_str(&db.ok(&["--store", &url, "stats", "--json"], None)).unwrap()
    };
    let before = stats(&db);
    assert!(before["changes"].as_u64().unwrap() > 0, "{before}");
    assert_exit(&db.run(&train, None), 0, &train);
    let after = stats(&db);
    for key in ["changes", "features", "weights"] {
        assert_eq!(after[key], before[key], "{key}");
    }
}

/// A Redis that may evict keys when full (`maxmemory` and an `allkeys-*`
/// policy) would drop counts and the registry without a word, and a
/// message learned again would be counted twice: commands that change the
/// counts refuse it, saying what to set; a `volatile-*` policy never
/// touches our keys (they have no time to live) and is taken.
#[test]
fn a_redis_that_may_evict_keys_is_refused_for_learning() {
    let redis = RedisServer::start();
    let url = redis.url("/0");
    let mut con = connect(&url);
    config_set(&mut con, "maxmemory", "100mb");
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    let db = Db::new();
    let message = files(sample_spam()).remove(0);
    let learn = |db: &Db| db.run(&["--store", &url, "learn", "--spam", utf8(&message)], None);
    let out = learn(&db);
    assert_exit(&out, 2, &["learn, allkeys-lru"]);
    assert!(
        stderr(&out).contains("maxmemory-policy allkeys-lru")
            && stderr(&out).contains("noeviction"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&train_sample(&url, &sample_spam(), &sample_ham()), None);
    assert_exit(&out, 2, &["train, allkeys-lru"]);
    // A user who may not read INFO (no @dangerous) learns, warned.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limited")
        .arg(&["on", ">pw", "~*", "&*", "+@all", "-@dangerous"][..])
        .query(&mut con)
        .unwrap();
    let limited = redis.url("/0").replace("redis://", "redis://limited:pw@");
    let out = db.run(
        &["--store", &limited, "learn", "--spam", utf8(&message)],
        None,
    );
    assert_exit(&out, 0, &["learn as a limited user"]);
    assert!(
        stderr(&out).contains("eviction policy could not be read"),
        "{}",
        stderr(&out)
    );
    // Taken back, so the rest starts from nothing learned.
    let out = db.run(&["--store", &limited, "unlearn", utf8(&message)], None);
    assert_exit(&out, 0, &["unlearn as a limited user"]);
    for policy in ["volatile-lru", "noeviction"] {
        config_set(&mut con, "maxmemory-policy", policy);
        assert_exit(&learn(&db), 0, &["learn", policy]);
    }
}

/// A "Redis" on a loopback port that answers each connection's first
/// request with a long string a byte at a time, one every 100 ms, without
/// end: no wait for it is long, and its answer never ends. Stopped, with
/// every connection it trickles to, when dropped.
struct TrickleRedis {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl TrickleRedis {
    fn start() -> TrickleRedis {
        use std::io::{Read, Write};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let server = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                let mut trickles = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let Ok((mut conn, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let stop = Arc::clone(&stop);
                    trickles.push(std::thread::spawn(move || {
                        let _ = conn.set_nonblocking(false);
                        let mut request = [0u8; 4096];
                        let _ = conn.read(&mut request);
                        let _ = conn.write_all(b"$100000000\r\n");
                        while !stop.load(Ordering::SeqCst) && conn.write_all(b"a").is_ok() {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }));
                }
                for t in trickles {
                    let _ = t.join();
                }
            }
        });
        TrickleRedis {
            port,
            stop,
            server: Some(server),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for TrickleRedis {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// `filter` passes the message on unchanged with no verdict
/// (`store-unavailable`) within twice `--store-timeout` of a
/// [`TrickleRedis`], instead of waiting with the message. Before, it waited
/// for as long as the answer kept coming (here: some fifty seconds; the
/// test gives up after twenty).
#[test]
fn filter_passes_the_message_on_when_the_store_trickles_its_answer() {
    let trickling = TrickleRedis::start();
    let db = Db::new();
    let raw = std::fs::read(&files(sample_ham())[0]).unwrap();
    let url = trickling.url();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(["--store", &url, "--store-timeout", "300", "filter"]);
    let (child, writer) = crate::common::spawn_with_stdin(cmd, &raw);
    let out = ended_within(child, 20, "filter still held the message");
    let _ = writer.join().unwrap();
    assert_exit(&out, 0, &["filter"]);
    assert!(out.stdout.ends_with(&raw), "the message was altered");
    let text = String::from_utf8_lossy(&out.stdout[..out.stdout.len() - raw.len()]).into_owned();
    assert!(
        text.starts_with("X-Spam-Status: Unknown, reason=store-unavailable"),
        "{text}"
    );
}

/// `learn` and `unlearn` with the counts in a [`TrickleRedis`] give up
/// after `--wait` or the timeout for each of the questions a change may
/// ask, whichever is longer, and say that learning again is safe. Before,
/// they waited as long as the answer came (Dovecot's pipe program until
/// Dovecot killed it; the test gives up after twenty seconds).
#[test]
fn learn_and_unlearn_give_up_on_a_store_that_trickles_its_answer() {
    let trickling = TrickleRedis::start();
    let db = Db::new();
    let url = trickling.url();
    let message = files(sample_spam())[0].clone();
    let message = utf8(&message);
    for command in [
        vec!["learn", "--wait", "1", "--spam", message],
        vec!["unlearn", "--wait", "1", message],
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args())
            .args(["--store", &url, "--store-timeout", "300"])
            .args(&command)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let out = ended_within(
            cmd.spawn().unwrap(),
            20,
            &format!("{} still waited", command[0]),
        );
        assert_exit(&out, 2, &command);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("gave no whole answer within 2400 ms")
                && err.contains("making it again is safe"),
            "{err}"
        );
    }
}

/// `child`'s output once it ends; killed, and `what` said, if it has not
/// ended after `secs` seconds (a test that fails rather than hangs).
fn ended_within(mut child: std::process::Child, secs: u64, what: &str) -> std::process::Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} after {secs} seconds");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// serve started on a [`TrickleRedis`] starts (the log says that Redis
/// gave no whole answer), and judges each message within its bound:
/// passed on with no verdict. Before, serve never started (its first
/// question to Redis, the eviction policy, was waited for as long as the
/// answer came), and a message judged was held as long.
#[test]
fn serve_starts_and_answers_when_the_store_trickles_its_answer() {
    let trickling = TrickleRedis::start();
    let db = Db::new();
    let url = trickling.url();
    let server = Server::start(&db, &["--store", &url, "--store-timeout", "300"]);
    let log = server.log_after("no whole answer");
    assert!(
        log.contains("gave no whole answer within 600 ms")
            && log.contains("its eviction policy is asked before each learn"),
        "{log}"
    );
    let started = Instant::now();
    let (code, answer) = post(&server.url("/check"), &files(sample_ham())[0], &[]);
    assert_eq!(code, 503, "{answer}");
    assert_eq!(answer["reason"], "store-unavailable", "{answer}");
    // No user named: twice the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    let log = server.log_after("why=the store gave no whole answer");
    assert!(log.contains("reason=store-unavailable model=none"), "{log}");
    // A learn is given up on too, after the timeout for each of the
    // questions a change may ask; before, it waited as long as the answer
    // came.
    let started = Instant::now();
    let (code, answer) = post(
        &server.url("/learn?class=spam"),
        &files(sample_spam())[0],
        &[],
    );
    assert_eq!(code, 503, "{answer}");
    assert_eq!(answer["reason"], "store-unavailable", "{answer}");
    assert!(
        answer.to_string().contains("within 2400 ms")
            && answer.to_string().contains("making it again is safe"),
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    // The thread still waiting for that answer does not keep serve from
    // stopping (before, it waited for it for ever).
    let mut server = server;
    assert!(server.terminate(), "serve stopped, but not cleanly");
}

/// serve started while its Redis is down starts, and asks Redis's
/// eviction policy before the first learn once it is back: a policy that
/// may evict counts refuses the learn, and learning goes on once it is
/// mended. Before, serve would not start while Redis was down (and
/// systemd soon stops restarting a unit that fails at once).
#[test]
fn serve_checks_the_eviction_policy_before_each_learn_even_when_started_while_redis_was_down() {
    let mut redis = RedisServer::start();
    let url = redis.url("/0");
    redis.kill();
    let db = Db::new();
    let server = Server::start(&db, &["--store", &url, "--store-timeout", "300"]);
    let log = server.log_after("before each learn");
    assert!(log.contains("Connection refused"), "{log}");
    redis.restart();
    let mut con = connect(&url);
    config_set(&mut con, "maxmemory", "100mb");
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    let message = &files(sample_spam())[0];
    for _ in 0..2 {
        let (code, answer) = post(&server.url("/learn?class=spam"), message, &[]);
        assert_ne!(code, 200, "{answer}");
        assert!(answer.to_string().contains("allkeys-lru"), "{answer}");
    }
    config_set(&mut con, "maxmemory-policy", "noeviction");
    let (code, answer) = post(&server.url("/learn?class=spam"), message, &[]);
    assert_eq!(
        (code, answer["action"].as_str()),
        (200, Some("learned")),
        "{answer}"
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(!keys.is_empty(), "nothing learned into Redis");
    // Switched to evicting while serve runs: asked again before each
    // learn, refused, and nothing changes.
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    let other = &files(sample_spam())[1];
    let (code, answer) = post(&server.url("/learn?class=spam"), other, &[]);
    assert_eq!(code, 500, "{answer}");
    assert_eq!(answer["reason"], "store-config", "{answer}");
    assert!(answer.to_string().contains("allkeys-lru"), "{answer}");
    let after: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(after.len(), keys.len(), "{after:?}");
}

/// serve refuses to start on a Redis that refuses it (a password the URL
/// lacks): that is not mended by waiting, unlike a Redis that is down.
#[test]
fn serve_refuses_to_start_on_a_redis_that_wants_a_password() {
    let redis = RedisServer::start();
    let url = redis.url("/0");
    config_set(&mut connect(&url), "requirepass", "secret");
    let db = Db::new();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(["--store", &url, "serve", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let out = ended_within(
        cmd.spawn().unwrap(),
        30,
        "serve started on a Redis that wants a password it lacks",
    );
    assert_exit(&out, 2, &["serve", "no password"]);
    assert!(stderr(&out).contains("password"), "{}", stderr(&out));
}

/// Many clients learning into one user's model at once, through two
/// servers: each learn lands (a host's changes to a model go one at a
/// time, and a thread waiting for one of its connections to Redis is woken
/// when one is free), none is refused for want of a connection or for the
/// others' changes.
#[test]
fn many_learns_at_once_into_one_model_all_land() {
    use std::io::{Read, Write};
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=busy");
    let db = Db::new();
    let servers: Vec<Server> = (0..2)
        .map(|_| Server::start(&db, &["--store", &url, "--max-connections", "512"]))
        .collect();
    const CLIENTS: usize = 128;
    const EACH: usize = 4;
    // One HTTP/1.1 request on a connection of its own; its status.
    let learn = |server: &Server, body: &[u8]| -> (u16, String) {
        let addr = server.url("").trim_start_matches("http://").to_string();
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST /learn?class=spam HTTP/1.1\r\nHost: x\r\nUser: busy@example.org\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(&[head.as_bytes(), body].concat()).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let code = answer.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, answer)
    };
    let failed = std::sync::Mutex::new(Vec::new());
    let start = std::sync::Barrier::new(CLIENTS);
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (server, failed, start, learn) = (&servers[c % 2], &failed, &start, &learn);
            scope.spawn(move || {
                let bodies: Vec<Vec<u8>> = (0..EACH)
                    .map(|k| crate::common::unseen((c + k) % 48, &format!("busy {c} {k}")))
                    .collect();
                start.wait();
                for body in &bodies {
                    let (code, answer) = learn(server, body);
                    if code != 200 {
                        failed.lock().unwrap().push(answer);
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} failed, the first: {}",
        failed.len(),
        failed[0]
    );
    let args = [
        "--store",
        &url,
        "stats",
        "--json",
        "--user",
        // As serve takes it: without case or the domain's trailing dot.
        "Busy@Example.org.",
    ];
    let stats: serde_json::Value = serde_json::from_str(&db.ok(&args, None)).unwrap();
    assert_eq!(stats["spam_messages"], (CLIENTS * EACH) as u64, "{stats}");
}

/// A store that holds nothing (a mistyped database number or prefix) is
/// no model, as a directory without one is, not a quiet "unsure" for every
/// message; and a user's model that cannot be read leaves the verdict to
/// the global one, logged once.
#[test]
fn an_empty_store_is_no_model_and_a_users_unreadable_model_leaves_the_verdict_to_the_global() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=t");
    let db = Db::new();
    let args = [
        "--store",
        &url,
        "--min-user-messages",
        "1",
        "--store-cache-ms",
        "0",
    ];
    let server = Server::start(&db, &args);
    let ham = &files(sample_ham())[0];
    let (code, answer) = post(&server.url("/check"), ham, &[]);
    assert_eq!(
        (code, answer["reason"].as_str()),
        (503, Some("no-model")),
        "{answer}"
    );
    let out = db.run(
        &["--store", &url, "filter"],
        Some(&std::fs::read(ham).unwrap()),
    );
    let delivered = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(delivered.contains("reason=no-model"), "{delivered}");
    db.ok(&train_sample(&url, &sample_spam(), &sample_ham()), None);
    let (code, global) = post(&server.url("/check"), ham, &[]);
    assert_eq!(code, 200, "{global}");
    // A key of another kind where a user's counts go.
    let _: () = redis::cmd("SET")
        .arg("{t:u:carl@example.org}:w")
        .arg("x")
        .query(&mut connect(&url))
        .unwrap();
    let user = ["User: carl@example.org"];
    for _ in 0..2 {
        let (code, got) = post(&server.url("/check"), ham, &user);
        assert_eq!(code, 200, "{got}");
        assert_eq!(got["log_odds"], global["log_odds"], "{got}");
    }
    let log = server.log_after("judged with the global model");
    assert_eq!(log.matches("user carl@example.org: ").count(), 1, "{log}");
}

/// `used_memory` of the Redis `con` is connected to.
fn used_memory(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Any client may name users, and a first learn begins a user's model: a
/// Redis within a tenth of its `maxmemory` begins none (507 `no-room`,
/// for now), so that a flood of new names cannot take the memory the
/// models there are need; once there is room again a new user begins one.
#[test]
fn a_redis_nearly_full_begins_no_new_users_model() {
    let redis = RedisServer::start();
    let url = redis.url("/0?prefix=room");
    let db = Db::new();
    let (spam, ham) = (files(sample_spam()), files(sample_ham()));
    db.ok(&train_sample(&url, &sample_spam(), &sample_ham()), None);
    let server = Server::start(&db, &["--store", &url]);
    // Without a limit nothing bounds new users' models: said at start.
    let warning = "has no maxmemory: nothing bounds the memory new users' models may take;";
    let log = server.log_after(" listening on ");
    assert!(log.contains(warning), "{log}");
    let learn = |user: &str, path: &PathBuf| {
        let user = format!("User: {user}");
        post(&server.url("/learn?class=spam"), path, &[&user])
    };
    let (code, got) = learn("carol", &spam[0]);
    assert_eq!(code, 200, "{got}");
    let mut con = connect(&redis.url("/0"));
    config_set(&mut con, "maxmemory-policy", "noeviction");
    let used = used_memory(&mut con);
    // Used at 91% of it: over nine tenths.
    config_set(&mut con, "maxmemory", &(used * 100 / 91).to_string());
    let (code, got) = learn("mallory1", &spam[1]);
    assert_eq!(
        (code, &got["reason"]),
        (507, &serde_json::Value::from("no-room")),
        "{got}"
    );
    assert!(
        got["why"].as_str().unwrap().contains("no new user's model"),
        "{got}"
    );
    let limited = Server::start(&db, &["--store", &url]);
    let log = limited.log_after(" listening on ");
    assert!(!log.contains(warning), "{log}");
    drop(limited);
    config_set(&mut con, "maxmemory", "0");
    let (code, got) = learn("carol", &ham[0]);
    assert_eq!(code, 200, "{got}");
    let (code, got) = learn("mallory1", &spam[1]);
    assert_eq!(code, 200, "{got}");
}
