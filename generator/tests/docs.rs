//! The user guide runs: every shell block of `README.md` and `docs/*.md` is executed
//! here, so the guide cannot drift from the program. (`CONTRIBUTING.md`, the
//! contributors' page, shows the project's own build and test commands: it is not run,
//! but its links are checked.)
//!
//! Conventions (also written down in `CONTRIBUTING.md`, "The guide is tested"):
//!
//! - A fenced block whose language is `sh`, `bash` or `console` is a script. It runs with
//!   `bash` under `set -euo pipefail`, in a temporary directory that holds a copy of
//!   `examples/`, with the `celld-gen` binary first on `PATH`. Lines of a `console`
//!   block lose a leading `$ `. The blocks of one Markdown file run in order in the same
//!   directory, so a later block sees the files an earlier one wrote.
//! - The block must exit 0, or with the status given as `exit=N` on the fence line
//!   (```` ```sh exit=1 ````): the status of the block is that of its last command.
//! - A ```` ```text ```` block right after a script (blank lines only in between) is its
//!   expected output: stdout and stderr together, line by line. A line `...` stands for
//!   any number of lines; `[..]` within a line stands for any text (a timing, a random
//!   identity). Everything else must match exactly (trailing spaces aside).
//! - A block of any language with `file=PATH` on the fence line
//!   (```` ```yaml file=fleets/ledger.yaml ````) is written to PATH in the temporary
//!   directory before the next script runs: how the guide shows an edit to a fleet file.
//! - `no-run` on the fence line skips a script. Only for commands that need a cluster or
//!   a registry, or would run this test suite itself; the line right above the fence must say why, as
//!   `<!-- no-run: REASON -->` (invisible once rendered). There may be at most
//!   [`MAX_NO_RUN`] of them, so the set stays small and every one is a decision.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Scripts that are shown but not run (a cluster or a registry is needed, or they would
/// run this very test suite). Raising it is a decision: say in the guide why the block cannot run.
const MAX_NO_RUN: usize = 12;

/// How long one script may take.
const TIMEOUT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the generator crate is inside the workspace")
        .to_path_buf()
}

/// The Markdown files of the guide, relative to the repository root.
fn guide_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[derive(Debug, Clone)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    attrs: Vec<String>,
    body: String,
    /// Only blank lines since the previous block closed.
    adjacent: bool,
    /// The reason of a `<!-- no-run: REASON -->` line right above the fence.
    no_run_reason: Option<String>,
}

impl Block {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find_map(|a| a.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    }
    fn flag(&self, name: &str) -> bool {
        self.attrs.iter().any(|a| a == name)
    }
    fn is_script(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash" | "console")
    }
}

/// Fenced blocks of a Markdown text. Fences may be indented (inside a list item); the
/// indentation of the opening fence is removed from the body.
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut blank_since_close = false;
    let mut any_closed = false;
    let mut previous = "";
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            if !line.trim().is_empty() {
                blank_since_close = false;
            }
            previous = line;
            continue;
        };
        let no_run_reason = previous
            .trim()
            .strip_prefix("<!-- no-run:")
            .and_then(|r| r.strip_suffix("-->"))
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty());
        let indent = line.len() - trimmed.len();
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("").to_string();
        let attrs = words.map(str::to_string).collect();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            let l = if l.len() >= indent && l[..indent].trim().is_empty() {
                &l[indent..]
            } else {
                l.trim_start()
            };
            body.push_str(l);
            body.push('\n');
        }
        out.push(Block {
            line: i + 1,
            lang,
            attrs,
            body,
            adjacent: any_closed && blank_since_close,
            no_run_reason,
        });
        any_closed = true;
        blank_since_close = true;
        previous = "";
    }
    out
}

/// Does one expected line (with `[..]` wildcards) match an actual line?
fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Expected lines (with `...` lines) against actual lines.
fn output_matches(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"...", rest)) => (0..=actual.len()).any(|k| output_matches(rest, &actual[k..])),
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| line_matches(e, a) && output_matches(rest, more)),
    }
}

fn lines_of(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().map(str::trim_end).collect();
    while v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// Cluster clients a guide script must not reach for: an unmarked `kubectl` fails at
/// once, whatever cluster the machine running the tests can reach.
const CLUSTER_TOOLS: &[&str] = &["kubectl", "helm", "flux", "argocd"];

/// A directory for the front of `PATH`: the `celld-gen` binary, and stand-ins for the
/// cluster clients that refuse to run.
fn bin_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("bin");
    fs::create_dir_all(&dir).expect("bin dir");
    let exe = Path::new(env!("CARGO_BIN_EXE_celld-gen"));
    #[cfg(unix)]
    std::os::unix::fs::symlink(exe, dir.join("celld-gen")).expect("link celld-gen");
    #[cfg(not(unix))]
    fs::copy(exe, dir.join("celld-gen")).expect("copy celld-gen");
    for tool in CLUSTER_TOOLS {
        let stub = dir.join(tool);
        fs::write(
            &stub,
            format!(
                "#!/bin/sh\necho '{tool} needs a cluster: mark the block `no-run`' >&2\nexit 97\n"
            ),
        )
        .expect("write stand-in");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&stub, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), target).expect("copy");
        }
    }
}

struct Run {
    status: Option<i32>,
    output: String,
    timed_out: bool,
}

fn run_script(script: &str, work: &Path, bin: &Path, home: &Path, log: &Path) -> Run {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = fs::File::create(log).expect("log file");
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\nexec 2>&1\n{script}"))
        .current_dir(work)
        .env("PATH", path)
        .env("HOME", home)
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        // One locale (`sort`, `find`) and a quiet, predictable git, whatever the machine.
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "init.defaultBranch")
        .env("GIT_CONFIG_VALUE_0", "main")
        .env("GIT_AUTHOR_NAME", "Docs Test")
        .env("GIT_AUTHOR_EMAIL", "docs@example.com")
        .env("GIT_COMMITTER_NAME", "Docs Test")
        .env("GIT_COMMITTER_EMAIL", "docs@example.com")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .spawn()
        .expect("run bash");
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break (s.code(), false);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = String::from_utf8_lossy(&fs::read(log).expect("read log")).into_owned();
    Run {
        status,
        output,
        timed_out,
    }
}

/// Runs every script of one Markdown file; returns the failures and the number of
/// `no-run` blocks.
fn run_file(rel: &Path) -> (Vec<String>, usize) {
    let text = fs::read_to_string(root().join(rel)).expect("read guide file");
    run_markdown(rel, &text)
}

/// Runs every script of one Markdown text (`rel` names it in failures).
fn run_markdown(rel: &Path, text: &str) -> (Vec<String>, usize) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let work = tmp.path().join("work");
    let home = tmp.path().join("home");
    fs::create_dir_all(&home).expect("home");
    copy_dir(&root().join("examples"), &work.join("examples"));
    let bin = bin_dir(tmp.path());
    let log = tmp.path().join("output.log");
    let all = blocks(text);
    let mut failures = Vec::new();
    let mut no_run = 0;
    for (i, b) in all.iter().enumerate() {
        let at = format!("{}:{}", rel.display(), b.line);
        if let Some(path) = b.attr("file") {
            if path.starts_with('/') || path.split('/').any(|c| c == "..") {
                failures.push(format!("{at}: file={path} must be a relative path"));
                continue;
            }
            let target = work.join(path);
            if let Some(dir) = target.parent() {
                fs::create_dir_all(dir).expect("mkdir for file=");
            }
            fs::write(&target, &b.body).expect("write file=");
            continue;
        }
        if !b.is_script() {
            continue;
        }
        if b.flag("no-run") {
            no_run += 1;
            if b.no_run_reason.is_none() {
                failures.push(format!(
                    "{at}: a `no-run` block needs a `<!-- no-run: why -->` line right above it"
                ));
            }
            continue;
        }
        let script: String = if b.lang == "console" {
            b.body
                .lines()
                .map(|l| l.strip_prefix("$ ").unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            b.body.clone()
        };
        let want_status = match b.attr("exit").map(str::parse::<i32>) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                failures.push(format!("{at}: exit= takes a number"));
                continue;
            }
        };
        let expected = all
            .get(i + 1)
            .filter(|n| n.lang == "text" && n.adjacent)
            .map(|n| n.body.clone());
        let r = run_script(&script, &work, &bin, &home, &log);
        let mut problems = Vec::new();
        if r.timed_out {
            problems.push(format!("timed out after {TIMEOUT:?}"));
        } else if r.status != Some(want_status) {
            problems.push(format!(
                "exit status {:?}, expected {want_status}",
                r.status
            ));
        }
        if let Some(exp) = &expected
            && !output_matches(&lines_of(exp), &lines_of(&r.output))
        {
            problems.push(format!("output differs; expected:\n{exp}"));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{at}: {}\n--- script:\n{script}\n--- actual output:\n{}",
                problems.join("; "),
                r.output
            ));
        }
    }
    (failures, no_run)
}

#[test]
fn every_shell_block_of_the_guide_runs() {
    let mut failures = Vec::new();
    let mut no_run = 0;
    let mut scripts = 0;
    for f in guide_files() {
        let text = fs::read_to_string(root().join(&f)).expect("read guide file");
        scripts += blocks(&text)
            .iter()
            .filter(|b| b.is_script() && !b.flag("no-run"))
            .count();
        let (fail, n) = run_file(&f);
        failures.extend(fail);
        no_run += n;
    }
    assert!(
        failures.is_empty(),
        "{} failing block(s) in the guide:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        no_run <= MAX_NO_RUN,
        "{no_run} `no-run` blocks, at most {MAX_NO_RUN}: run the command, or justify raising the limit"
    );
    assert!(
        scripts >= 10,
        "only {scripts} scripts ran: is the guide there?"
    );
}

/// CI and contributors find the two entry points in the README.
#[test]
fn readme_keeps_the_two_commands() {
    let text = fs::read_to_string(root().join("README.md")).expect("README");
    let shell: String = blocks(&text)
        .iter()
        .filter(|b| b.is_script())
        .map(|b| b.body.clone())
        .collect();
    for cmd in ["scripts/render-examples.sh", "scripts/test-all.sh"] {
        assert!(
            shell.lines().any(|l| l.trim_start().starts_with(cmd)),
            "README.md must show `{cmd}` in a shell block"
        );
    }
    let ci = fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(ci.contains("scripts/test-all.sh"), ".ci/run runs test-all");
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut set = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code && let Some(h) = line.strip_prefix('#') {
            set.insert(slug(h.trim_start_matches('#').replace('`', "").as_str()));
        }
    }
    set
}

/// Relative links `](path)` and `](path#anchor)` of the guide point at files (and
/// headings) that exist.
#[test]
fn guide_links_resolve() {
    let mut files = guide_files();
    files.push(PathBuf::from("CONTRIBUTING.md"));
    files.push(PathBuf::from("tests/README.md"));
    files.push(PathBuf::from("healer/README.md"));
    let mut broken = Vec::new();
    for f in &files {
        let text = fs::read_to_string(root().join(f)).expect("read");
        let dir = f.parent().unwrap_or(Path::new(""));
        let mut in_code = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            if in_code {
                continue;
            }
            for part in line.split("](").skip(1) {
                let Some(end) = part.find(')') else { continue };
                let target = &part[..end];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target, None),
                };
                let file = if path.is_empty() {
                    f.clone()
                } else {
                    dir.join(path)
                };
                let full = root().join(&file);
                if !full.exists() {
                    broken.push(format!("{}:{}: {target}: no such file", f.display(), n + 1));
                    continue;
                }
                if let Some(a) = anchor
                    && full.is_file()
                    && !anchors(&fs::read_to_string(&full).expect("read")).contains(a)
                {
                    broken.push(format!(
                        "{}:{}: {target}: no such heading",
                        f.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Kubernetes' own words the healer reads (Pod phases, container waiting reasons, kinds,
/// the metrics.k8s.io kinds and quantity suffixes the capacity collector parses) and never
/// reports as its own reason.
const NOT_HEALER_REASONS: &[&str] = &[
    // The HTTP authentication scheme of /metrics (`WWW-Authenticate: Bearer`).
    "Bearer",
    "Bound",
    "CelldFleet",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "Deployment",
    "ErrImageNeverPull",
    "ErrImagePull",
    "Failed",
    "FieldManagerConflict",
    "Gi",
    "ImagePullBackOff",
    // The node-selector operator of a volume's zone affinity.
    "In",
    // The API server's reason for a JSON patch it cannot apply (`runtime/act.rs`).
    "Invalid",
    "InvalidImageName",
    "Ki",
    "Lease",
    "Mi",
    // The name column of a server-side Table (the fresh read's claim names).
    "Name",
    "Pending",
    "PersistentVolumeClaim",
    "Pod",
    "PodMetrics",
    "PodMetricsList",
    "PodScheduled",
    "ReplicaSet",
    "Running",
    "StatefulSet",
    "Succeeded",
    "Ti",
];

/// The healer's source files that report reasons, states and Events (tests excluded).
fn healer_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).expect("read healer/src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "sim") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&root().join("healer/src"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !(name.starts_with("tests") || name == "proptests.rs" || name == "testkit.rs")
        })
        .map(|p| {
            let text = fs::read_to_string(&p).expect("read healer source");
            // Unit tests sit at the end of a file, after `#[cfg(test)]`.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            (p, code)
        })
        .collect()
}

/// String literals of Rust code (comments skipped, escapes honoured; raw strings are
/// not used where reasons are written).
fn string_literals(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            // A char literal: 'x' or '\x'.
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 3,
            '\'' if chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') => i += 4,
            '"' => {
                let mut lit = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if let Some(&c) = chars.get(i) {
                        lit.push(c);
                    }
                    i += 1;
                }
                out.push(lit);
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// String literals in CamelCase (`"MemberReplaced"`, `"Converged"`).
fn camel_literals(code: &str) -> BTreeSet<String> {
    string_literals(code)
        .into_iter()
        .filter(|piece| {
            let mut chars = piece.chars();
            chars.next().is_some_and(|c| c.is_ascii_uppercase())
                && chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && piece.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .collect()
}

/// Every condition reason (the `Reason` enum), and every other reason, member state and
/// Event reason the healer writes, is explained in `docs/status.md`.
#[test]
fn every_healer_reason_is_documented() {
    let status_doc = fs::read_to_string(root().join("docs/status.md")).expect("docs/status.md");
    let documented = |word: &str| status_doc.contains(&format!("`{word}`"));

    // The `Reason` enum, variant by variant, straight from its declaration.
    let src = fs::read_to_string(root().join("healer/src/decide/status.rs")).expect("status.rs");
    let body = src
        .split("pub enum Reason {")
        .nth(1)
        .and_then(|s| s.split("\n}").next())
        .expect("`pub enum Reason {` in healer/src/decide/status.rs");
    let variants: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && !l.is_empty())
        .map(|l| l.trim_end_matches(','))
        .collect();
    assert!(variants.len() >= 10, "parsed Reason variants: {variants:?}");
    for v in &variants {
        assert!(
            v.chars().all(|c| c.is_ascii_alphanumeric()),
            "a Reason variant that is not a plain name ({v}): update this parser"
        );
        // `as_str` is the CamelCase name; check it says so.
        assert!(
            src.contains(&format!("Reason::{v} => \"{v}\"")),
            "Reason::{v} reports another string than its name: update docs/status.md and this test"
        );
    }
    let missing: Vec<&&str> = variants.iter().filter(|v| !documented(v)).collect();
    assert!(
        missing.is_empty(),
        "condition reasons missing from docs/status.md: {missing:?}"
    );

    // Every other CamelCase word the healer writes: Event reasons, the application
    // view's reasons, capacity reasons, member states.
    let mut missing = BTreeSet::new();
    for (path, code) in healer_sources() {
        for word in camel_literals(&code) {
            if !NOT_HEALER_REASONS.contains(&word.as_str()) && !documented(&word) {
                missing.insert(format!("{word} ({})", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "words the healer reports, missing from docs/status.md (document them, or add \
         Kubernetes' own words to NOT_HEALER_REASONS): {missing:?}"
    );
}

#[test]
fn matcher_wildcards() {
    assert!(line_matches(
        "rendered [..] in [..] ms",
        "rendered 1 fleet in 3 ms"
    ));
    assert!(!line_matches(
        "rendered [..] in [..] ms",
        "rendered 1 fleet in 3 s"
    ));
    assert!(line_matches("[..]", ""));
    assert!(output_matches(&["a", "...", "d"], &["a", "b", "c", "d"]));
    assert!(output_matches(&["a", "...", "d"], &["a", "d"]));
    assert!(!output_matches(&["a", "d"], &["a", "b", "d"]));
    let b = blocks("x\n```sh exit=1\nfalse\n```\n\n```text\nout\n```\n");
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].attr("exit"), Some("1"));
    assert!(b[1].adjacent);
}

/// The harness itself: a failing command, a wrong output, an unmarked cluster command
/// and a bad `file=` path are each reported; `exit=`, `file=` and `no-run` work.
#[test]
fn harness_reports_what_it_should() {
    let page = Path::new("page.md");
    let fails = |md: &str| run_markdown(page, md).0;
    assert_eq!(fails("```sh\nfalse\necho never\n```\n").len(), 1);
    assert_eq!(fails("```sh\necho hi\n```\n\n```text\nho\n```\n").len(), 1);
    let kubectl = fails("```sh\nkubectl get pods\n```\n");
    assert!(
        kubectl.len() == 1 && kubectl[0].contains("needs a cluster"),
        "{kubectl:?}"
    );
    assert_eq!(fails("```yaml file=../x.yaml\na: 1\n```\n").len(), 1);
    assert_eq!(fails("```sh exit=1\nfalse\n```\n").len(), 0);
    // A text block after prose is not an expected output.
    assert_eq!(
        fails("```sh\necho hi\n```\nprose\n```text\nho\n```\n").len(),
        0
    );
    let ok = "```yaml file=a/b.yaml\nk: v\n```\n```console\n$ cat a/b.yaml\n```\n\n```text\nk: v\n```\n<!-- no-run: needs a cluster -->\n```sh no-run\nkubectl apply -f a/\n```\n";
    let (f, no_run) = run_markdown(page, ok);
    assert!(f.is_empty(), "{f:?}");
    assert_eq!(no_run, 1);
    assert_eq!(fails("```sh no-run\nkubectl get pods\n```\n").len(), 1);
    let ids = string_literals(
        r#"let a = "One"; // "NotThis"
    let c = '"'; let b = "Two \"quoted\" end";"#,
    );
    assert_eq!(ids, ["One", "Two \"quoted\" end"]);
}
