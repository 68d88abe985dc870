//! Whole-process throughput, latency and memory of `bayesmail serve`
//! against one process per message, on the same machine in the same run,
//! every tool trained on the whole public corpus:
//!
//! - `serve --http`, each client one kept-alive connection sending
//!   `POST /check` with the message as body;
//! - `serve --spamd` through `spamc -c`, one spamc process per message (as
//!   an MDA runs it), which bounds that figure by process start-up;
//! - `bayesmail filter`, one process per message;
//! - `bogofilter -p`, one process per message;
//!
//! each with 1 and 8 parallel clients (`BAYESMAIL_SERVE_CLIENTS`, a comma
//! list), ROUNDS rounds with the order of the tools rotating from round to
//! round. Throughput is the median over rounds; latencies (p50, p99) are
//! per message, pooled over rounds, measured by the client from the first
//! byte it sends to the last it reads (for a process, from spawn to exit).
//! Then serve's resident memory (peak and now) beside its model's size.
//!
//! Last, a model per user: USERS users (default 1,000), each with a model
//! of its own (50 messages learned, above `--min-user-messages`), judged
//! round-robin by 8 HTTP clients through a serve whose `--cache-mb` is far
//! below what all the models take: every answer must come from the user's
//! own model, the models open at the end must fit the bound, and the
//! resident memory is printed beside it.
//!
//! Then the counts in Redis (`--store`, skipped with
//! `BAYESMAIL_SERVE_REDIS=0`): the corpus trained into a `redis-server` of
//! the bench's own, and `serve --http --store` against `serve --http` on
//! the sled database in the same rounds, and with no counts kept
//! (`--store-cache-ms 0`: every feature asked of Redis); the latency of
//! learning and unlearning over HTTP with each; Redis's memory per 1,000
//! messages learned and per stored feature, and, where `rspamd` and
//! `rspamc` are installed, rspamd's (its Redis Bayes, the same messages
//! learned into an rspamd of the bench's own on free loopback ports, over
//! a redis-server of its own).
//!
//! ```sh
//! BAYESMAIL_CORPUS=../shared/corpora/spamassassin cargo bench --bench serve
//! BAYESMAIL_SERVE_MESSAGES=2000 BAYESMAIL_SERVE_PROCESS_MESSAGES=300 \
//!   BAYESMAIL_SERVE_ROUNDS=3 BAYESMAIL_SERVE_USERS=1000 BAYESMAIL_SERVE_CACHE_MB=32 \
//!   cargo bench --bench serve
//! ```
//!
//! Needs `bogofilter`, `spamc` and `redis-server` on the PATH (Debian:
//! `apt-get install bogofilter spamc redis-server`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{
    corpus_dir, env_number, fail, files_in, folders, judges, median, quantile, require, run,
    train_bayesmail, train_bogofilter,
};

fn main() {
    let corpus = corpus_dir();
    require("bogofilter", "-V", "bogofilter");
    require("spamc", "-V", "spamc");
    let n_http = env_number("BAYESMAIL_SERVE_MESSAGES", 2000);
    let n_process = env_number("BAYESMAIL_SERVE_PROCESS_MESSAGES", 300);
    let rounds = env_number("BAYESMAIL_SERVE_ROUNDS", 3);
    let n_users = env_number("BAYESMAIL_SERVE_USERS", 1000);
    let cache_mb = env_number("BAYESMAIL_SERVE_CACHE_MB", 32);
    let clients: Vec<usize> = std::env::var("BAYESMAIL_SERVE_CLIENTS")
        .unwrap_or_else(|_| "1,8".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .unwrap_or_else(|_| fail(&format!("BAYESMAIL_SERVE_CLIENTS: {c} is not a number")))
        })
        .collect();
    let bm = PathBuf::from(env!("CARGO_BIN_EXE_bayesmail"));
    let work = tempfile::tempdir().expect("temporary directory");
    let bm_db = work.path().join("bayesmail-db");
    let bogo_db = work.path().join("bogofilter-db");
    std::fs::create_dir(&bogo_db).expect("bogofilter directory");

    let (spam, ham) = folders(&corpus);
    let files = files_in(&[spam.clone(), ham.clone()].concat());
    eprintln!("training both tools on {} messages", files.len());
    train_bayesmail(&bm, &bm_db, &spam, &ham);
    train_bogofilter(&bogo_db, &spam, &ham);
    if let Err(status) = judges(&bm, &bm_db, &files[0]) {
        fail(&format!(
            "filter does not judge {}: {status}",
            files[0].display()
        ));
    }

    // The same messages for every tool, spread over the corpus.
    let spread = |n: usize| -> Vec<PathBuf> {
        let step = (files.len() / n.max(1)).max(1);
        files.iter().step_by(step).take(n).cloned().collect()
    };
    let http_sample: Vec<Vec<u8>> = spread(n_http)
        .iter()
        .map(|f| std::fs::read(f).expect("corpus message"))
        .collect();
    let process_sample = spread(n_process);

    let server = Server::start(
        &bm,
        &bm_db,
        &["--http", "127.0.0.1:0", "--spamd", "127.0.0.1:0"],
    );
    let (http, spamd) = (server.address("http"), server.address("spamd"));
    let spamd_port = spamd.rsplit_once(':').expect("HOST:PORT").1.to_owned();
    for raw in http_sample.iter().take(50) {
        let answer = Http::connect(&http).check(raw, None);
        if answer["verdict"].is_null() {
            fail(&format!("serve gives no verdict: {answer}"));
        }
    }

    let tools = [
        "serve --http (kept alive)",
        "serve --spamd via spamc -c",
        "bayesmail filter",
        "bogofilter -p",
    ];
    let run_tool = |tool: usize, c: usize| -> Timed {
        match tool {
            0 => parallel(
                c,
                http_sample.len(),
                || Http::connect(&http),
                |conn, i| {
                    let start = Instant::now();
                    let answer = conn.check(&http_sample[i], None);
                    assert!(!answer["verdict"].is_null(), "no verdict: {answer}");
                    start.elapsed()
                },
            ),
            1 => parallel(
                c,
                process_sample.len(),
                || (),
                |(), i| {
                    let mut cmd = Command::new("spamc");
                    cmd.args(["-c", "-d", "127.0.0.1", "-p", &spamd_port]);
                    run(&mut cmd, &process_sample[i]).wall
                },
            ),
            2 => parallel(
                c,
                process_sample.len(),
                || (),
                |(), i| {
                    let mut cmd = Command::new(&bm);
                    cmd.arg("--db").arg(&bm_db).arg("filter");
                    run(&mut cmd, &process_sample[i]).wall
                },
            ),
            _ => parallel(
                c,
                process_sample.len(),
                || (),
                |(), i| {
                    let mut cmd = Command::new("bogofilter");
                    cmd.arg("-d").arg(&bogo_db).arg("-p");
                    run(&mut cmd, &process_sample[i]).wall
                },
            ),
        }
    };
    for &c in &clients {
        let mut timed: Vec<Vec<Timed>> = (0..tools.len()).map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for j in 0..tools.len() {
                let tool = (round + j) % tools.len();
                timed[tool].push(run_tool(tool, c));
            }
        }
        println!("{c} parallel client(s), {rounds} rounds:");
        let rates = report(&tools, &timed);
        println!(
            "  throughput ratios: serve HTTP / filter {:.1}   spamc / filter {:.2}   serve HTTP / bogofilter {:.1}   filter / bogofilter {:.2}",
            rates[0] / rates[2],
            rates[1] / rates[2],
            rates[0] / rates[3],
            rates[2] / rates[3]
        );
    }
    let model_mib = std::fs::metadata(bm_db.join("model.bin"))
        .expect("the model")
        .len() as f64
        / MIB;
    let (hwm, rss) = server.memory();
    println!(
        "serve, one model: peak RSS {:.1} MiB, RSS now {:.1} MiB, model {:.1} MiB (peak - model {:.1} MiB)",
        hwm / MIB,
        rss / MIB,
        model_mib,
        hwm / MIB - model_mib
    );
    drop(server);

    if std::env::var_os("BAYESMAIL_SERVE_REDIS").is_none_or(|v| v != "0") {
        redis_against_sled(&bm, &bm_db, &spam, &ham, &http_sample, &clients, rounds);
    }

    if n_users > 0 {
        per_user(
            &bm,
            work.path(),
            &bm_db,
            &spam,
            &ham,
            n_users,
            cache_mb,
            &http_sample,
        );
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// `serve --http` with the counts in Redis (`--store`) against the same
/// serve on the sled database, both trained on the whole corpus, in the
/// same run: messages per second and latency with each client count;
/// the latency of learning (an unlearn, then the learn back, of messages
/// the model holds: each a real change); and Redis's memory per message
/// and per feature stored.
fn redis_against_sled(
    bm: &Path,
    bm_db: &Path,
    spam: &[PathBuf],
    ham: &[PathBuf],
    sample: &[Vec<u8>],
    clients: &[usize],
    rounds: usize,
) {
    require("redis-server", "--version", "redis-server");
    let dir = tempfile::tempdir().expect("temporary directory");
    let port = free_port();
    let mut redis = redis_server(port, dir.path());
    let url = format!("redis://127.0.0.1:{port}/0");
    let used_memory = || redis_used_memory(port);
    let empty = used_memory();
    let started = Instant::now();
    let mut train = Command::new(bm);
    train.args(["--store", &url, "train", "-q", "--spam"]);
    train.args(spam).arg("--ham").args(ham);
    let status = train.status().expect("train runs");
    if !status.success() {
        fail(&format!("train --store failed: {status}"));
    }
    let trained_in = started.elapsed();
    let stats = Command::new(bm)
        .args(["--store", &url, "stats", "--json"])
        .output()
        .expect("stats runs");
    let stats: serde_json::Value =
        serde_json::from_slice(&stats.stdout).unwrap_or_else(|e| fail(&format!("stats: {e}")));
    let messages = stats["ham_messages"].as_f64().unwrap_or(0.0)
        + stats["spam_messages"].as_f64().unwrap_or(0.0);
    let features = stats["features"].as_f64().unwrap_or(f64::NAN);
    let used = used_memory() - empty;
    println!(
        "Redis store: train of {messages} messages in {:.1} s; Redis memory {:.1} MiB: \
         {:.2} MiB per 1,000 messages learned, {:.1} bytes per stored feature ({features} features)",
        trained_in.as_secs_f64(),
        used / MIB,
        used / messages * 1000.0 / MIB,
        used / features
    );
    rspamd_memory(spam, ham, used / messages, used / features);

    let sled_server = Server::start(bm, bm_db, &["--http", "127.0.0.1:0"]);
    let redis_server = Server::start(bm, bm_db, &["--store", &url, "--http", "127.0.0.1:0"]);
    // Every message's counts asked of Redis: what a stream of messages
    // with no words in common would cost.
    let uncached_server = Server::start(
        bm,
        bm_db,
        &[
            "--store",
            &url,
            "--store-cache-ms",
            "0",
            "--http",
            "127.0.0.1:0",
        ],
    );
    let addrs = [
        sled_server.address("http"),
        redis_server.address("http"),
        uncached_server.address("http"),
    ];
    let names = [
        "serve --http, sled",
        "serve --http --store redis",
        "  ... --store-cache-ms 0",
    ];
    for &c in clients {
        let mut timed: [Vec<Timed>; 3] = Default::default();
        for round in 0..rounds {
            for j in 0..addrs.len() {
                let tool = (round + j) % addrs.len();
                let addr = &addrs[tool];
                timed[tool].push(parallel(
                    c,
                    sample.len(),
                    || Http::connect(addr),
                    |conn, i| {
                        let start = Instant::now();
                        let answer = conn.check(&sample[i], None);
                        assert!(!answer["verdict"].is_null(), "no verdict: {answer}");
                        start.elapsed()
                    },
                ));
            }
        }
        println!("{c} parallel client(s), {rounds} rounds:");
        let rates = report(&names, &timed);
        println!(
            "  throughput ratio: Redis / sled {:.2}, with no counts kept {:.2}",
            rates[1] / rates[0],
            rates[2] / rates[0]
        );
    }

    // Learning: unlearn, then learn back, each message (real changes).
    let n = sample.len().min(200);
    for (tool, addr) in addrs.iter().enumerate().take(2) {
        let mut conn = Http::connect(addr);
        let mut ms = Vec::with_capacity(2 * n);
        for raw in &sample[..n] {
            let start = Instant::now();
            let answer = conn.post("/unlearn", raw, None);
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            let label = answer["label"]
                .as_str()
                .unwrap_or_else(|| fail(&format!("unlearn: {answer}")))
                .to_string();
            let start = Instant::now();
            let answer = conn.post(&format!("/learn?class={label}"), raw, None);
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            if answer["action"] != "learned" {
                fail(&format!("learn back: {answer}"));
            }
        }
        println!(
            "  {:<28} learn or unlearn over HTTP: p50 {:.2} ms, p99 {:.2} ms ({} of each)",
            names[tool],
            quantile(ms.clone(), 0.5),
            quantile(ms, 0.99),
            n
        );
    }
    let (hwm, _) = redis_server.memory();
    println!("  serve --store peak RSS {:.1} MiB", hwm / MIB);
    drop((sled_server, redis_server, uncached_server));
    let _ = redis.kill();
    let _ = redis.wait();
}

/// Redis's `used_memory` (bytes) of the redis-server on `port`, once it
/// answers.
fn redis_used_memory(port: u16) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "info", "memory"])
            .output();
        if let Ok(out) = out
            && let Some(v) = String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<f64>().ok())
        {
            return v;
        }
        if Instant::now() > deadline {
            fail("redis-server does not answer");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A redis-server on loopback `port`, in `dir`, persisting nothing.
fn redis_server(port: u16, dir: &Path) -> Child {
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// rspamd's Redis Bayes beside ours, where rspamd is installed: the same
/// messages learned through `rspamc learn_spam` / `learn_ham` into an
/// rspamd of our own (its workers on free loopback ports, every learn
/// allowed, no DNS) over a redis-server of its own; Redis memory per 1,000
/// messages learned and per token stored, beside ours (bytes per message
/// learned, per feature stored).
fn rspamd_memory(spam: &[PathBuf], ham: &[PathBuf], ours_per_message: f64, ours_per_feature: f64) {
    let installed = |p: &str, arg: &str| {
        Command::new(p)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !installed("rspamd", "--version") || !installed("rspamc", "--help") {
        println!("  rspamd's Redis Bayes is not measured: rspamd is not installed here.");
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let (redis_port, normal, controller, proxy) =
        (free_port(), free_port(), free_port(), free_port());
    let mut redis = redis_server(redis_port, dir.path());
    let conf = dir.path().join("etc");
    for sub in ["local.d", "override.d"] {
        std::fs::create_dir_all(conf.join(sub)).expect("rspamd's configuration directory");
    }
    let write = |name: &str, text: String| {
        std::fs::write(conf.join(name), text).expect("rspamd's configuration");
    };
    for (name, port) in [
        ("normal", normal),
        ("controller", controller),
        ("proxy", proxy),
    ] {
        write(
            &format!("override.d/worker-{name}.inc"),
            format!("bind_socket = \"127.0.0.1:{port}\";\ncount = 1;\n"),
        );
    }
    write(
        "local.d/classifier-bayes.conf",
        format!("backend = \"redis\";\nservers = \"127.0.0.1:{redis_port}\";\nmin_learns = 0;\n"),
    );
    // Every message learned, as ours are (rspamd's default skips a ham
    // its Bayes already calls ham).
    write(
        "override.d/classifier-bayes.conf",
        "learn_condition = 'return function(task, is_spam, is_unlearn) return true end';\n".into(),
    );
    write(
        "local.d/redis.conf",
        format!("servers = \"127.0.0.1:{redis_port}\";\n"),
    );
    // No resolver: nothing leaves the machine.
    write(
        "local.d/options.inc",
        "dns { nameserver = [\"127.0.0.1:1\"]; timeout = 0.1s; retransmits = 1; }\n".into(),
    );
    write(
        "override.d/logging.inc",
        format!(
            "type = \"file\";\nfilename = \"{}\";\nlevel = \"error\";\n",
            dir.path().join("rspamd.log").display()
        ),
    );
    let var = |k: &str, v: &Path| format!("--var={k}={}", v.display());
    let pid = dir.path().join("rspamd.pid");
    let mut rspamd = Command::new("rspamd");
    rspamd
        .args(["-f", "-c", "/etc/rspamd/rspamd.conf"])
        .arg(var("LOCAL_CONFDIR", &conf))
        .arg(var("DBDIR", dir.path()))
        .arg(var("RUNDIR", dir.path()))
        .arg(var("LOGDIR", dir.path()))
        .arg("-p")
        .arg(&pid)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        rspamd.args(["-u", "root", "-g", "root", "-i"]);
    }
    let mut rspamd = rspamd.spawn().expect("rspamd starts");
    let address = format!("127.0.0.1:{controller}");
    let rspamc = |args: &[&str], files: &[PathBuf]| {
        Command::new("rspamc")
            .args(["-h", &address, "-n", "4"])
            .args(args)
            .args(files)
            .output()
            .expect("rspamc runs")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rspamc(&["stat"], &[]).status.success() {
        if Instant::now() > deadline {
            fail("rspamd's controller does not answer");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let empty = redis_used_memory(redis_port);
    let mut learned = 0;
    for (command, files) in [("learn_spam", spam), ("learn_ham", ham)] {
        let out = rspamc(&[command], files);
        learned += String::from_utf8_lossy(&out.stdout)
            .matches("success = true")
            .count();
    }
    let used = redis_used_memory(redis_port) - empty;
    let keys = Command::new("redis-cli")
        .args(["-p", &redis_port.to_string(), "dbsize"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(f64::NAN);
    let learned = learned as f64;
    println!(
        "  rspamd {} (Redis Bayes, every message learned): {learned} messages, Redis memory \
         {:.1} MiB: {:.2} MiB per 1,000 messages learned, {:.1} bytes per token ({keys} keys); \
         bayesmail / rspamd per token {:.2}, per message learned {:.2}",
        rspamd_version(),
        used / MIB,
        used / learned * 1000.0 / MIB,
        used / keys,
        ours_per_feature / (used / keys),
        ours_per_message / (used / learned)
    );
    // SIGTERM: the main process stops its workers.
    let _ = Command::new("kill").arg(rspamd.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rspamd.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = rspamd.kill();
    let _ = rspamd.wait();
    let _ = redis.kill();
    let _ = redis.wait();
}

/// `rspamd --version`'s version.
fn rspamd_version() -> String {
    Command::new("rspamd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .last()
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// `n_users` users with a model each, judged round-robin through a serve
/// whose cache holds `cache_mb` megabytes of models.
#[allow(clippy::too_many_arguments)]
fn per_user(
    bm: &Path,
    work: &Path,
    global: &Path,
    spam: &[PathBuf],
    ham: &[PathBuf],
    n_users: usize,
    cache_mb: usize,
    sample: &[Vec<u8>],
) {
    // One user's model, learned from 25 spam and 25 ham, copied to every
    // user (a copy is a database like any other).
    let teach = work.join("teach");
    for (class, dirs) in [("spam", spam), ("ham", ham)] {
        let dir = teach.join(class);
        std::fs::create_dir_all(&dir).expect("teaching folder");
        for (i, f) in files_in(dirs).iter().step_by(40).take(25).enumerate() {
            std::fs::copy(f, dir.join(i.to_string())).expect("teaching message");
        }
    }
    let users = work.join("users");
    let first = users.join("u0");
    train_bayesmail(bm, &first, &[teach.join("spam")], &[teach.join("ham")]);
    for u in 1..n_users {
        copy_dir(&first, &users.join(format!("u{u}")));
    }
    let user_mib = file_len(&first.join("model.bin")) as f64 / MIB;
    let pattern = format!("{}/%u", users.display());
    let cache = cache_mb.to_string();
    let server = Server::start(
        bm,
        global,
        &[
            "--http",
            "127.0.0.1:0",
            "--user-db",
            &pattern,
            "--cache-mb",
            &cache,
        ],
    );
    let http = server.address("http");
    let requests = 2 * n_users;
    let timed = parallel(
        8,
        requests,
        || Http::connect(&http),
        |conn, i| {
            let user = format!("u{}", i % n_users);
            let start = Instant::now();
            let answer = conn.check(&sample[i % sample.len()], Some(&user));
            let took = start.elapsed();
            assert_eq!(
                answer["model"].as_str(),
                Some(format!("user:{user}").as_str()),
                "{user} is judged by its own model: {answer}"
            );
            took
        },
    );
    let metrics = Http::connect(&http).get("/metrics");
    let open: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("bayesmail_model_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    let open_mib = open.iter().sum::<f64>() / MIB;
    let (hwm, rss) = server.memory();
    let latencies: Vec<f64> = timed
        .latencies
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    println!(
        "{n_users} users, a model each ({user_mib:.2} MiB; {:.0} MiB in all), --cache-mb {cache_mb}, 8 HTTP clients, {requests} messages round-robin:",
        user_mib * n_users as f64
    );
    println!(
        "  {:.0} msg/s   p50 {:.3} ms   p99 {:.3} ms   every answer from the user's own model",
        timed.rate(),
        quantile(latencies.clone(), 0.5),
        quantile(latencies, 0.99)
    );
    println!(
        "  models open at the end: {} ({open_mib:.1} MiB, bound {cache_mb} MiB)   serve peak RSS {:.1} MiB, now {:.1} MiB",
        open.len(),
        hwm / MIB,
        rss / MIB
    );
    if open_mib > cache_mb as f64 {
        fail(&format!(
            "the models open take {open_mib:.1} MiB, over --cache-mb {cache_mb}"
        ));
    }
}

/// Prints each tool's median throughput over the rounds and its latency
/// quantiles pooled over them; returns the throughputs.
fn report(names: &[&str], timed: &[Vec<Timed>]) -> Vec<f64> {
    let rates: Vec<f64> = timed
        .iter()
        .map(|t| median(t.iter().map(Timed::rate).collect()))
        .collect();
    for (tool, t) in timed.iter().enumerate() {
        let ms: Vec<f64> = t
            .iter()
            .flat_map(|t| t.latencies.iter().map(|d| d.as_secs_f64() * 1e3))
            .collect();
        println!(
            "  {:<28} {:>8.0} msg/s   p50 {:>7.3} ms   p99 {:>7.3} ms   ({} messages a round)",
            names[tool],
            rates[tool],
            quantile(ms.clone(), 0.5),
            quantile(ms, 0.99),
            t[0].latencies.len()
        );
    }
    rates
}

/// What one timed run of many messages gives: its wall time and each
/// message's latency.
struct Timed {
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Timed {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// `n` messages through `clients` threads, each with its own state made by
/// `open` (a connection), taking the next message index from a shared
/// counter; `each` judges message `i` and returns its latency.
fn parallel<S>(
    clients: usize,
    n: usize,
    open: impl Fn() -> S + Sync,
    each: impl Fn(&mut S, usize) -> Duration + Sync,
) -> Timed {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let latencies = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                scope.spawn(|| {
                    let mut state = open();
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break mine;
                        }
                        mine.push(each(&mut state, i));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("client thread"))
            .collect()
    });
    Timed {
        wall: start.elapsed(),
        latencies,
    }
}

/// A running `bayesmail serve`, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    bound: Vec<String>,
}

impl Server {
    /// `bin --db db serve ARGS`, once it listens everywhere it was told.
    fn start(bin: &Path, db: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(bin)
            .arg("--db")
            .arg(db)
            .arg("serve")
            .stdin(Stdio::null())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let listeners = args
            .iter()
            .filter(|a| a.starts_with("--") && ["--http", "--spamd", "--milter"].contains(a))
            .count();
        let bound = (0..listeners).map(|_| listening(&rx)).collect();
        // Later lines are read and dropped so that serve never blocks on a
        // full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Server { child, bound }
    }

    /// Where the `protocol` listener listens (HOST:PORT).
    fn address(&self, protocol: &str) -> String {
        self.bound
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{protocol} listening on ")))
            .unwrap_or_else(|| fail(&format!("serve does not say where {protocol} listens")))
            .to_owned()
    }

    /// Peak and current resident memory, in bytes (`/proc/PID/status`).
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("serve's /proc status");
        let field = |name: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .map_or(f64::NAN, |kib| kib * 1024.0)
        };
        (field("VmHWM:"), field("VmRSS:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a child this bench started.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// The next "PROTOCOL listening on ADDR" line serve writes, as
/// "PROTOCOL listening on ADDR"; exits after ten seconds without one.
fn listening(rx: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(at) = line.find(" listening on ") {
                    let protocol = line[..at].rsplit(' ').next().unwrap_or("");
                    return format!("{protocol}{}", &line[at..]);
                }
            }
            Err(_) => break,
        }
    }
    fail("serve did not start listening");
}

/// One kept-alive HTTP/1.1 connection to serve.
struct Http {
    reader: BufReader<TcpStream>,
}

impl Http {
    fn connect(addr: &str) -> Http {
        let stream =
            TcpStream::connect(addr).unwrap_or_else(|e| fail(&format!("connect to {addr}: {e}")));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Http {
            reader: BufReader::new(stream),
        }
    }

    /// `POST /check` with `raw` as body (as `user`): the JSON answer.
    fn check(&mut self, raw: &[u8], user: Option<&str>) -> serde_json::Value {
        self.post("/check", raw, user)
    }

    /// `POST path` with `raw` as body (as `user`): the JSON answer.
    fn post(&mut self, path: &str, raw: &[u8], user: Option<&str>) -> serde_json::Value {
        let user = user.map_or(String::new(), |u| format!("User: {u}\r\n"));
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: bench\r\n{user}Content-Length: {}\r\n\r\n",
            raw.len()
        );
        let stream = self.reader.get_mut();
        stream
            .write_all(&[head.as_bytes(), raw].concat())
            .expect("request sent");
        let body = self.answer();
        serde_json::from_slice(&body).unwrap_or_else(|e| fail(&format!("answer is not JSON: {e}")))
    }

    /// `GET path`: the body as text.
    fn get(&mut self, path: &str) -> String {
        let head = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
        self.reader
            .get_mut()
            .write_all(head.as_bytes())
            .expect("request sent");
        String::from_utf8_lossy(&self.answer()).into_owned()
    }

    /// The body of the next answer (its length from `Content-Length`).
    fn answer(&mut self) -> Vec<u8> {
        let mut length = None;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.reader.read_line(&mut line).expect("answer read");
            if n == 0 {
                fail("serve closed the connection");
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.unwrap_or_else(|| fail("an answer without Content-Length"))];
        self.reader.read_exact(&mut body).expect("answer body");
        body
    }
}

/// Copies the directory tree `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("directory");
    for entry in std::fs::read_dir(from).expect("directory") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The size of a file in bytes (0 if it is not there).
fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}
