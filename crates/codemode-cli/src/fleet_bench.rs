//! `codemode bench --fleet`: what `codemode serve --http` carries, measured from outside by a load
//! generator in this process (rmcp's streamable-HTTP client on tokio, so that the client is not
//! what saturates first). Every server is a real `codemode serve --http` child of this binary;
//! Redis is a real `redis-server` on a free loopback port with a temporary directory. All of them
//! are killed when the bench ends, whatever its outcome ([`Children`]).
//!
//! Rows (each `--seconds` long, after a warm-up; numbers are printed, never asserted):
//! - **trivial cells**: one server (memory store), `exec {"code": "return 1+1"}` back to back from
//!   1, 8 and 64 clients (`--concurrency`): cells/s, p50/p99 as the client sees them;
//! - **suspend + resume, memory store**: one server; each client runs `exec` of a cell that yields
//!   (`await yield_control()`), then `wait` on its run, back to back;
//! - **suspend + resume, 1 replica, Redis**: one of the fleet's servers alone, one client: what the
//!   Redis store adds to a resume in one process;
//! - **suspend + resume, fleet**: three servers sharing one Redis; each run's `exec` goes to one
//!   replica and its `wait` to the next, so every resume reads the snapshot another process wrote.
//!
//! Each row also gives the CPU each party spent per cell or run (servers, Redis, this load
//! generator; from `/proc`), so where the machine's cores go is visible when they are the limit.

use anyhow::{Context as _, Result, anyhow, bail};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, Command};

/// The cell of the trivial rows.
const TRIVIAL: &str = "return 1+1";
/// The cell of the suspend + resume rows: suspends at once; its `wait` completes it.
const YIELDS: &str = "await yield_control(); return 7";
/// The clients of the suspend + resume rows (one alone: what Redis adds to an unloaded resume).
const RESUME_CLIENTS: &[usize] = &[1, 8, 32];
/// How long a row warms up (connections open, engines warm) before it is measured.
const WARM_UP: Duration = Duration::from_millis(500);

/// A started `codemode serve --http` replica: its MCP URL and pid.
struct Server {
    url: String,
    pid: u32,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// User + system CPU seconds of process `pid` so far (Linux `/proc`).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime: fields 14 and 15 of proc_pid_stat(5), 11 and 12 after the command's `)`,
    // in clock ticks, which /proc always counts at USER_HZ = 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

async fn start_redis(children: &mut Vec<Child>, dir: &std::path::Path) -> Result<(String, u32)> {
    let port = free_port()?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("redis-server (installed by scripts/setup.sh) could not be started")?;
    let pid = child.id().unwrap_or_default();
    children.push(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() > deadline {
            bail!("redis-server did not listen on port {port} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((format!("redis://127.0.0.1:{port}"), pid))
}

async fn start_server(children: &mut Vec<Child>, store: Option<&str>) -> Result<Server> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--http", "127.0.0.1:0"]);
    if let Some(url) = store {
        cmd.args(["--store", url]);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().unwrap_or_default();
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    children.push(child);
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await? {
            if let Some(at) = line.find("serving MCP at ") {
                let url = line[at + "serving MCP at ".len()..].split_whitespace().next().unwrap_or_default();
                return Ok::<_, anyhow::Error>(Some(url.to_string()));
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| anyhow!("codemode serve did not report its address within 30 s"))??
    .ok_or_else(|| anyhow!("codemode serve exited before serving"))?;
    // Keep draining its stderr, so that its logging never blocks it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Server { url, pid })
}

type Client = RunningService<RoleClient, ()>;

async fn connect(url: &str, who: &str) -> Result<Client> {
    let cfg = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .auth_header(who.to_string());
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(cfg);
    Ok(().serve(transport).await?)
}

/// One tool call; its structured result (the `exec`/`wait` JSON).
async fn call(client: &Client, tool: &'static str, args: Value) -> Result<Value> {
    let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap_or_default());
    let res = client.peer().call_tool(params).await?;
    res.structured_content.ok_or_else(|| anyhow!("{tool} answered without structured content"))
}

/// One trivial cell on `on`: its latency.
async fn trivial(on: &Client) -> Result<(Duration, Option<Duration>)> {
    let t = Instant::now();
    let r = call(on, "exec", json!({ "code": TRIVIAL })).await?;
    let took = t.elapsed();
    if r["status"] != "completed" || r["value"] != 2 {
        bail!("trivial cell: {r}");
    }
    Ok((took, None))
}

/// One yielding cell suspended on `on` and resumed on `next`: the `exec` and the resume latency.
async fn suspend_and_resume(on: &Client, next: &Client) -> Result<(Duration, Option<Duration>)> {
    let t = Instant::now();
    let r = call(on, "exec", json!({ "code": YIELDS })).await?;
    let exec_took = t.elapsed();
    if r["status"] != "waiting" {
        bail!("the yielding cell did not suspend: {r}");
    }
    let run_id = r["runId"].clone();
    let t = Instant::now();
    let w = call(next, "wait", json!({ "runId": run_id })).await?;
    let resume_took = t.elapsed();
    if w["status"] != "completed" || w["value"] != 7 {
        bail!("the resumed run: {w}");
    }
    Ok((exec_took, Some(resume_took)))
}

/// What one row measured.
#[derive(Default)]
struct Row {
    done: u64,
    errors: u64,
    first_error: Option<String>,
    /// Latency of the row's first call (`exec`), as the client sees it.
    first: Vec<Duration>,
    /// Latency of the resume (`wait`) of suspend + resume rows.
    resume: Vec<Duration>,
    elapsed: Duration,
    /// CPU seconds over the window: servers, Redis, this process.
    cpu_servers: f64,
    cpu_redis: f64,
    cpu_client: f64,
}

/// Runs `clients` clients for `seconds` against `servers`: each client has one connection to
/// every server, and either runs trivial cells (`resume == false`, on its first server) or
/// suspends on server `i` and resumes on server `i + 1`.
async fn drive(servers: &[Server], redis_pid: Option<u32>, clients: usize, seconds: f64, resume: bool) -> Result<Row> {
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let mut conns = Vec::with_capacity(clients);
    for c in 0..clients {
        let who = format!("bench-client-{c}");
        let mut mine = Vec::with_capacity(urls.len());
        for url in &urls {
            mine.push(connect(url, &who).await.with_context(|| format!("connecting to {url}"))?);
        }
        conns.push(mine);
    }
    let start_at = Instant::now() + WARM_UP;
    let end_at = start_at + Duration::from_secs_f64(seconds);
    let cpu = |pid: Option<u32>| pid.map(cpu_seconds).unwrap_or(0.0);
    let server_cpu = || servers.iter().map(|s| cpu_seconds(s.pid)).sum::<f64>();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mine) in conns.into_iter().enumerate() {
        tasks.spawn(async move {
            let mut row = Row::default();
            let mut i = c;
            loop {
                let now = Instant::now();
                if now >= end_at {
                    break;
                }
                let on = &mine[i % mine.len()];
                i += 1;
                let next = &mine[i % mine.len()];
                let outcome = if resume { suspend_and_resume(on, next).await } else { trivial(on).await };
                // Counted only when it started after the warm-up and ended inside the window.
                let counted = now >= start_at && Instant::now() <= end_at;
                match outcome {
                    Ok((first, resumed)) if counted => {
                        row.done += 1;
                        row.first.push(first);
                        row.resume.extend(resumed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        row.errors += 1;
                        row.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
            for conn in mine {
                let _ = conn.cancel().await;
            }
            row
        });
    }
    tokio::time::sleep_until(start_at.into()).await;
    let (s0, r0, c0) = (server_cpu(), cpu(redis_pid), cpu_seconds(std::process::id()));
    let t0 = Instant::now();
    tokio::time::sleep_until(end_at.into()).await;
    let (s1, r1, c1) = (server_cpu(), cpu(redis_pid), cpu_seconds(std::process::id()));
    let mut total =
        Row { elapsed: t0.elapsed(), cpu_servers: s1 - s0, cpu_redis: r1 - r0, cpu_client: c1 - c0, ..Row::default() };
    while let Some(row) = tasks.join_next().await {
        let row = row?;
        total.done += row.done;
        total.errors += row.errors;
        if total.first_error.is_none() {
            total.first_error = row.first_error;
        }
        total.first.extend(row.first);
        total.resume.extend(row.resume);
    }
    total.first.sort();
    total.resume.sort();
    Ok(total)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Row {
    fn per_second(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn cpu_ms_per(&self, cpu: f64) -> f64 {
        cpu * 1e3 / (self.done.max(1) as f64)
    }

    fn json(&self, kind: &str, clients: usize, servers: usize) -> Value {
        let p = |v: &[Duration], q: f64| ms(codemode_demo::bench::percentile(v, q));
        json!({
            "row": kind,
            "servers": servers,
            "clients": clients,
            "done": self.done,
            "perSecond": self.per_second(),
            "errors": self.errors,
            "firstError": self.first_error,
            "execP50Ms": p(&self.first, 0.5),
            "execP99Ms": p(&self.first, 0.99),
            "resumeP50Ms": (!self.resume.is_empty()).then(|| p(&self.resume, 0.5)),
            "resumeP99Ms": (!self.resume.is_empty()).then(|| p(&self.resume, 0.99)),
            "cpuMsPer": {
                "servers": self.cpu_ms_per(self.cpu_servers),
                "redis": self.cpu_ms_per(self.cpu_redis),
                "loadClient": self.cpu_ms_per(self.cpu_client),
            },
        })
    }
}

/// `codemode bench --fleet`.
pub async fn run(concurrency: Vec<usize>, seconds: f64, as_json: bool) -> Result<ExitCode> {
    let levels = if concurrency.is_empty() { vec![1, 8, 64] } else { concurrency };
    let dir = tempfile::Builder::new().prefix("codemode-bench-fleet-").tempdir()?;
    let mut procs = Vec::new();
    let mut rows = Vec::new();
    let outcome = async {
        let print = |row: &Value| {
            if !as_json {
                print_row(row);
            }
        };
        if !as_json {
            println!(
                "{:<34} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  cpu ms per cell/run: servers / redis / load client",
                "row", "clients", "per s", "p50 ms", "p99 ms", "resume50", "resume99", "errors"
            );
        }
        // One server, memory store: trivial cells, then suspend + resume.
        let single = start_server(&mut procs, None).await?;
        let single = [single];
        for &n in &levels {
            let row = drive(&single, None, n, seconds, false).await?.json("trivial cells, 1 server", n, 1);
            print(&row);
            rows.push(row);
        }
        for &n in RESUME_CLIENTS {
            let row = drive(&single, None, n, seconds, true).await?.json("suspend+resume, memory store", n, 1);
            print(&row);
            rows.push(row);
        }
        // Three replicas on one Redis: exec on one, wait on the next.
        let (redis_url, redis_pid) = start_redis(&mut procs, dir.path()).await?;
        let mut fleet = Vec::new();
        for _ in 0..3 {
            fleet.push(start_server(&mut procs, Some(&redis_url)).await?);
        }
        // One of them alone, one client: what Redis adds to a resume in one process (the
        // serialized snapshot and its signature, the store's round trips), apart from what moving
        // each run to another, idle process adds.
        let row =
            drive(&fleet[..1], Some(redis_pid), 1, seconds, true).await?.json("suspend+resume, 1 replica, Redis", 1, 1);
        print(&row);
        rows.push(row);
        for &n in RESUME_CLIENTS {
            let row =
                drive(&fleet, Some(redis_pid), n, seconds, true).await?.json("suspend+resume, 3 replicas, Redis", n, 3);
            print(&row);
            rows.push(row);
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    // The servers and Redis are killed as `procs` drops (`kill_on_drop`), the directory removed as
    // `dir` drops: whatever the outcome.
    drop(procs);
    drop(dir);
    outcome?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&Value::Array(rows))?);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(row: &Value) {
    let f = |k: &str| row[k].as_f64().map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
    let cpu = &row["cpuMsPer"];
    let c = |k: &str| cpu[k].as_f64().unwrap_or(0.0);
    println!(
        "{:<34} {:>7} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>6}  {:.3} / {:.3} / {:.3}",
        row["row"].as_str().unwrap_or_default(),
        row["clients"],
        row["perSecond"].as_f64().unwrap_or(0.0),
        f("execP50Ms"),
        f("execP99Ms"),
        f("resumeP50Ms"),
        f("resumeP99Ms"),
        row["errors"],
        c("servers"),
        c("redis"),
        c("loadClient"),
    );
    if let Some(e) = row["firstError"].as_str() {
        println!("    first error: {e}");
    }
}
