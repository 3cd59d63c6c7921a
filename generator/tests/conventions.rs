//! The conventions of a packaged command line, end to end through the built binary:
//! `version`, `completion`, `man`, `-` for standard input, a quiet broken pipe,
//! `check --format github|junit`, and one healer namespace for `install` and `render`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_celld-gen"));
    // Tests must not see a namespace set in the developer's shell.
    c.env("NO_COLOR", "1")
        .env_remove("CELLD_GEN_HEALER_NAMESPACE");
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

/// Runs with `input` on standard input.
fn run_stdin(args: &[&str], input: &str) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
}

fn example(name: &str) -> String {
    examples().join(name).to_string_lossy().into_owned()
}

fn example_text(name: &str) -> String {
    std::fs::read_to_string(examples().join(name)).unwrap()
}

/// A copy of `persistent.yaml` with `members: 0` (line 12, column 12).
fn invalid_fleet(dir: &Path) -> PathBuf {
    let text = example_text("persistent.yaml").replace("members: 3", "members: 0");
    let path = dir.join("bad.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn version_prints_version_commit_and_kubernetes_range() {
    let out = run(&["version"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(
        s.starts_with(&format!(
            "celld-gen {}\ncommit: ",
            env!("CARGO_PKG_VERSION")
        )),
        "{s}"
    );
    assert!(s.contains("\nkubernetes: 1.34-1.37\n"), "{s}");
    let commit = s.lines().nth(1).unwrap().trim_start_matches("commit: ");
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );

    let out = run(&["version", "--format", "json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["kubernetes"]["min"], "1.34");
    assert_eq!(
        v["kubernetes"]["supported"],
        serde_json::json!(["1.34", "1.35", "1.36", "1.37"])
    );
    assert_eq!(v["kubernetes"]["max"], "1.37");
    assert_eq!(v["commit"], commit);
    // The image `install` renders without --image (this build's default).
    let stream = run(&["install", "--stdout"]);
    let image = v["healerImage"].as_str().expect("healerImage");
    assert!(
        String::from_utf8_lossy(&stream.stdout).contains(&format!("image: \"{image}\"")),
        "install does not render the image version reports: {image}"
    );
}

#[test]
fn completion_scripts_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_celld__gen()"),
        ("zsh", "#compdef celld-gen"),
        ("fish", "complete -c celld-gen"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "celld-gen"),
    ] {
        let out = run(&["completion", shell]);
        assert!(out.status.success(), "{shell}");
        let s = text(&out.stdout);
        assert!(s.contains(marker), "{shell}: {s:.200}");
        // Subcommands and their flags are completed.
        assert!(s.contains("healer-namespace"), "{shell}");
    }
    let out = run(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid value 'tcsh'"));
}

/// The completion scripts, run in the shells themselves: bash (the system's), zsh and
/// fish (Debian's packages, fetched by `tests/shells/fetch.sh` into target/shells). Each
/// completes a subcommand, that subcommand's flags, and never the hidden `crds`.
#[test]
fn completion_works_in_bash_zsh_and_fish() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let fetched = Command::new("bash")
        .arg(root.join("tests/shells/fetch.sh"))
        .output()
        .unwrap();
    assert!(fetched.status.success(), "{}", text(&fetched.stderr));
    let env: std::collections::BTreeMap<String, String> = text(&fetched.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let script = |shell: &str, file: &str| {
        let out = run(&["completion", shell]);
        assert!(out.status.success());
        let p = dir.path().join(file);
        std::fs::write(&p, &out.stdout).unwrap();
        p
    };
    let bash = script("bash", "celld-gen.bash");
    let fish = script("fish", "celld-gen.fish");
    script("zsh", "_celld-gen");
    // Each shell's candidates for a line, sorted.
    let complete = |shell: &str, line: &str| -> Vec<String> {
        let out = match shell {
            "bash" => {
                let words: Vec<&str> = line.split(' ').collect();
                let prog = format!(
                    "source {}; COMP_WORDS=({}); COMP_CWORD={}; _celld__gen celld-gen {} {}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                    bash.display(),
                    line,
                    words.len() - 1,
                    words[words.len() - 1],
                    words[words.len() - 2],
                );
                Command::new("bash").args(["-c", &prog]).output().unwrap()
            }
            "fish" => Command::new(&env["FISH"])
                .args([
                    "-c",
                    &format!("source {}; complete -C '{line}'", fish.display()),
                ])
                .env("LD_LIBRARY_PATH", &env["LIBS"])
                .output()
                .unwrap(),
            _ => Command::new(&env["ZSH"])
                .arg("-f")
                .arg(root.join("tests/shells/zsh-complete.zsh"))
                .args([&env["ZSH_MODULES"], &env["ZSH_FUNCTIONS"]])
                .arg(dir.path())
                .arg(line)
                .output()
                .unwrap(),
        };
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let mut words: Vec<String> = text(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").trim().to_string())
            .filter(|w| !w.is_empty())
            .collect();
        words.sort();
        words.dedup();
        words
    };
    for shell in ["bash", "zsh", "fish"] {
        assert_eq!(complete(shell, "celld-gen re"), ["render"], "{shell}");
        assert_eq!(
            complete(shell, "celld-gen render --allow-r"),
            ["--allow-removal"],
            "{shell}: a subcommand's flags"
        );
        let c = complete(shell, "celld-gen c");
        assert!(c.contains(&"check".to_string()), "{shell}: {c:?}");
        assert!(
            !c.contains(&"crds".to_string()),
            "{shell}: hidden `crds` offered: {c:?}"
        );
    }
}

#[test]
fn man_page_is_roff_from_the_help() {
    let out = run(&["man"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(s.contains(".TH celld-gen 1"), "{s:.300}");
    assert!(s.contains("celld\\-gen\\-render(1)") || s.contains("render"));
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let out = run(&["man", "--dir", pages.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "celld-gen.1",
        "celld-gen-render.1",
        "celld-gen-check.1",
        "celld-gen-install.1",
    ] {
        let p = pages.join(page);
        assert!(p.exists(), "{page}");
    }
    let render = std::fs::read_to_string(pages.join("celld-gen-render.1")).unwrap();
    assert!(render.contains("healer\\-namespace"), "{render:.500}");
}

#[test]
fn stdin_dash_for_check_render_and_diff() {
    let fleet = example_text("persistent.yaml");
    let out = run_stdin(&["check", "-"], &fleet);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("1 fleet valid"));

    let bad = fleet.replace("members: 3", "members: 0");
    let out = run_stdin(&["check", "-"], &bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).starts_with("<stdin>:12:12: spec.members: 0 is out of range"),
        "{}",
        text(&out.stdout)
    );

    let out = run_stdin(&["render", "-", "--stdout"], &fleet);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let from_file = run(&["render", &example("persistent.yaml"), "--stdout"]);
    assert_eq!(out.stdout, from_file.stdout);

    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    let out = run(&[
        "render",
        &example("persistent.yaml"),
        "-o",
        deploy.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let out = run_stdin(&["diff", "-", "-o", deploy.to_str().unwrap()], &fleet);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is up to date"));

    // `-` twice reads the one input once; with a file it is one more input.
    let out = run_stdin(&["check", "-", "-"], &fleet);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run_stdin(&["check", "-", &example("bucket-deployment.yaml")], &fleet);
    assert!(
        text(&out.stderr).contains("2 fleets valid"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn broken_pipe_ends_quietly_with_status_zero() {
    for args in [
        vec![
            "render".to_string(),
            examples().to_string_lossy().into_owned(),
            "--stdout".into(),
        ],
        vec!["install".into(), "--stdout".into()],
        vec!["man".into()],
        vec!["schema".into()],
        vec!["version".into()],
        [
            "init", "alpha", "--namespace", "apps", "--profile", "Bucket", "--bucket",
            "alpha-cells", "--region", "us-east-1", "--zones", "a",
            "--image",
            "ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424",
        ]
        .map(String::from)
        .to_vec(),
        vec!["completion".into(), "zsh".into()],
    ] {
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the reading end before anything is read: every write gets EPIPE.
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn check_format_github_annotates_each_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad = invalid_fleet(dir.path());
    let out = run(&[
        "check",
        bad.to_str().unwrap(),
        &example("bucket-deployment.yaml"),
        "--format",
        "github",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert_eq!(
        s,
        format!(
            "::error file={},line=12,col=12,title=celld-gen check%3A spec.members::0 is out of range (expected a whole number from 1 to 100)\n",
            bad.display()
        )
    );
    // Valid fleets: no annotations, status 0.
    let out = run(&["check", &example("persistent.yaml"), "--format", "github"]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    // Standard input has no file to point at; the message says where.
    let text_in = example_text("persistent.yaml").replace("members: 3", "members: 0");
    let out = run_stdin(&["check", "-", "--format", "github"], &text_in);
    assert!(
        text(&out.stdout).starts_with(
            "::error title=celld-gen check%3A spec.members::<stdin>:12:12: 0 is out of range"
        ),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn check_format_junit_has_one_testcase_per_fleet_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = invalid_fleet(dir.path());
    std::fs::copy(
        examples().join("bucket-deployment.yaml"),
        dir.path().join("good.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("other.yaml"), "kind: ConfigMap\n").unwrap();
    let out = run(&["check", dir.path().to_str().unwrap(), "--format", "junit"]);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"),
        "{s}"
    );
    assert!(s.contains("tests=\"2\" failures=\"1\""), "{s}");
    assert!(s.contains(&format!("name=\"{}\"", bad.display())), "{s}");
    assert!(s.contains(&format!(
        "name=\"{}\" file=\"{}\"/>",
        dir.path().join("good.yaml").display(),
        dir.path().join("good.yaml").display()
    )));
    assert!(
        s.contains("<failure type=\"invalid\" message=\"1 problem\">"),
        "{s}"
    );
    assert!(!s.contains("other.yaml"), "{s}");
    // Byte-stable: the same report twice.
    let again = run(&["check", dir.path().to_str().unwrap(), "--format", "junit"]);
    assert_eq!(out.stdout, again.stdout);

    let out = run(&["check", &example("persistent.yaml"), "--format", "junit"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("tests=\"1\" failures=\"0\""));
}

/// The healer namespace of a rendered fleet NetworkPolicy.
fn admitted_namespace(stream: &str) -> Vec<String> {
    stream
        .lines()
        .filter_map(|l| l.trim().strip_prefix("kubernetes.io/metadata.name: \""))
        .map(|v| v.trim_end_matches('"').to_owned())
        .filter(|v| v != "kube-system")
        .collect()
}

#[test]
fn install_and_render_agree_on_the_healer_namespace() {
    let fleet = example("persistent.yaml");
    // Default: both celld-system, from the one constant.
    let out = run(&["render", &fleet, "--stdout"]);
    assert_eq!(admitted_namespace(&text(&out.stdout)), ["celld-system"]);
    let install = text(&run(&["install", "--stdout"]).stdout);
    assert!(install.contains("namespace: \"celld-system\""));

    // The flag.
    let out = run(&["render", &fleet, "--stdout", "--healer-namespace", "ops"]);
    assert!(out.status.success());
    assert_eq!(admitted_namespace(&text(&out.stdout)), ["ops"]);

    // The setting both read.
    let out = bin()
        .args(["render", &fleet, "--stdout"])
        .env("CELLD_GEN_HEALER_NAMESPACE", "ops")
        .output()
        .unwrap();
    assert_eq!(admitted_namespace(&text(&out.stdout)), ["ops"]);
    let out = bin()
        .args(["install", "--stdout"])
        .env("CELLD_GEN_HEALER_NAMESPACE", "ops")
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("namespace: \"ops\""));
    assert!(!text(&out.stdout).contains("celld-system"));

    // A mismatch is an error, for every command that reads it.
    for (args, code) in [
        (
            vec![
                "render",
                fleet.as_str(),
                "--stdout",
                "--healer-namespace",
                "x",
            ],
            1,
        ),
        (vec!["check", fleet.as_str(), "--healer-namespace", "x"], 1),
        (
            vec![
                "diff",
                fleet.as_str(),
                "-o",
                "nowhere",
                "--healer-namespace",
                "x",
            ],
            2,
        ),
        (vec!["install", "--stdout", "--namespace", "x"], 1),
    ] {
        let out = bin()
            .args(&args)
            .env("CELLD_GEN_HEALER_NAMESPACE", "ops")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("`x` disagrees with CELLD_GEN_HEALER_NAMESPACE=`ops`"),
            "{args:?}: {err}"
        );
    }
    // Agreeing values are fine.
    let out = bin()
        .args(["render", &fleet, "--stdout", "--healer-namespace", "ops"])
        .env("CELLD_GEN_HEALER_NAMESPACE", "ops")
        .output()
        .unwrap();
    assert!(out.status.success());

    // Not a namespace name.
    let out = run(&["render", &fleet, "--stdout", "--healer-namespace", "Ops"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--healer-namespace `Ops` is not a namespace name"));
    let out = bin()
        .args(["render", &fleet, "--stdout"])
        .env("CELLD_GEN_HEALER_NAMESPACE", "a_b")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("CELLD_GEN_HEALER_NAMESPACE `a_b` is not a namespace name"));

    // diff renders with the same namespace as render: a tree rendered for `ops` is up to
    // date only for `ops`.
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    let d = deploy.to_str().unwrap();
    assert!(
        run(&["render", &fleet, "-o", d, "--healer-namespace", "ops"])
            .status
            .success()
    );
    assert_eq!(
        run(&["diff", &fleet, "-o", d, "--healer-namespace", "ops"])
            .status
            .code(),
        Some(0)
    );
    let out = run(&["diff", &fleet, "-o", d, "--color", "never"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("+          kubernetes.io/metadata.name: \"celld-system\""));
}

#[test]
fn help_teaches_the_new_flags_with_examples() {
    let help = text(&run(&["render", "--help"]).stdout);
    assert!(help.contains("--healer-namespace <NS>"));
    assert!(help.contains("render fleets/ -o deploy/ --healer-namespace ops"));
    assert!(help.contains("render - --stdout < fleets/alpha.yaml"));
    let help = text(&run(&["check", "--help"]).stdout);
    assert!(help.contains("--format github"));
    assert!(help.contains("--format junit > check.xml"));
    assert!(help.contains("check fleets/ --healer-namespace ops"));
    let help = text(&run(&["diff", "--help"]).stdout);
    assert!(help.contains("diff - -o deploy/ < fleets/alpha.yaml"));
    assert!(help.contains("diff fleets/ -o deploy/ --healer-namespace ops"));
    let help = text(&run(&["install", "--help"]).stdout);
    assert!(help.contains("CELLD_GEN_HEALER_NAMESPACE"));
    let help = text(&run(&["--help"]).stdout);
    for cmd in ["version", "completion", "man"] {
        assert!(help.contains(&format!("celld-gen {cmd}")), "{cmd}");
    }
    let help = text(&run(&["completion", "--help"]).stdout);
    assert!(help.contains("celld-gen completion bash >"));
    let help = text(&run(&["man", "--help"]).stdout);
    assert!(help.contains("celld-gen man --dir"));
}
