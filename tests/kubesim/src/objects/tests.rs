use super::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PodStatus};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn spec() -> NodeSpec {
    NodeSpec {
        name: node_name("sim", "us-east-1b", 1),
        zone: "us-east-1b".into(),
        region: "us-east-1".into(),
        ip: Ipv4Addr::new(127, 19, 0, 4),
        prefix: "sim".into(),
        cpu: "8".into(),
        memory: "32Gi".into(),
        pods: 110,
    }
}

fn claim(annotations: &[(&str, &str)]) -> PersistentVolumeClaim {
    let ann: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "data-alpha-0", "namespace": "apps", "uid": "1234-abcd",
                     "annotations": ann},
        "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": "gp3",
                 "resources": {"requests": {"storage": "20Gi"}}},
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

fn class(mode: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "gp3"},
        "provisioner": "kubesim.celld.dev/disk",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": mode,
    }))
    .unwrap()
}

const P: &str = "kubesim.celld.dev/disk";

#[test]
fn node_names_and_objects() {
    let n = spec();
    assert_eq!(n.name, "sim-us-east-1b-1");
    let obj: Node = serde_json::from_value(node_object(&n)).unwrap();
    let labels = obj.metadata.labels.unwrap();
    assert_eq!(labels[ZONE_LABEL], "us-east-1b");
    assert_eq!(labels[REGION_LABEL], "us-east-1");
    assert_eq!(labels[HOSTNAME_LABEL], "sim-us-east-1b-1");
    assert_eq!(labels[OS_LABEL], "linux");
    assert_eq!(labels[SIM_NODE_LABEL], "sim");

    let t = ts("2026-11-29T10:00:00Z");
    let status = node_status(&n, "boot", t, t);
    let status: k8s_openapi::api::core::v1::NodeStatus =
        serde_json::from_value(status["status"].clone()).unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(status.allocatable.as_ref().unwrap()["cpu"].0, "8");
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(status.addresses.unwrap()[0].address, "127.19.0.4");
    assert_eq!(status.node_info.unwrap().kubelet_version, KUBELET_VERSION);
}

#[test]
fn lease_is_owned_by_the_node_and_renewed_now() {
    let t = ts("2026-11-29T10:00:01.5Z");
    let lease: Lease = serde_json::from_value(node_lease("sim-a-0", Some("uid-1"), 40, t)).unwrap();
    assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("sim-a-0"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert_eq!(spec.renew_time.unwrap().0, t);
    assert_eq!(lease.metadata.owner_references.unwrap()[0].uid, "uid-1");
}

#[test]
fn claims_are_provisioned_only_when_both_annotations_name_us() {
    let wffc = class("WaitForFirstConsumer");
    let both = claim(&[
        (SELECTED_NODE_ANNOTATION, "sim-us-east-1a-0"),
        (STORAGE_PROVISIONER_ANNOTATION, P),
    ]);
    assert_eq!(
        claim_wants_volume(&both, Some(&wffc), P),
        Some("sim-us-east-1a-0")
    );
    // Scheduler has not picked a node yet.
    let no_node = claim(&[(STORAGE_PROVISIONER_ANNOTATION, P)]);
    assert_eq!(claim_wants_volume(&no_node, Some(&wffc), P), None);
    // PV controller has not handed it to an external provisioner yet.
    let no_prov = claim(&[(SELECTED_NODE_ANNOTATION, "n")]);
    assert_eq!(claim_wants_volume(&no_prov, Some(&wffc), P), None);
    // Someone else's provisioner.
    let other = claim(&[
        (SELECTED_NODE_ANNOTATION, "n"),
        (STORAGE_PROVISIONER_ANNOTATION, "ebs.csi.aws.com"),
    ]);
    assert_eq!(claim_wants_volume(&other, Some(&wffc), P), None);
    // Immediate binding classes and unknown classes are not ours to provision.
    assert_eq!(
        claim_wants_volume(&both, Some(&class("Immediate")), P),
        None
    );
    assert_eq!(claim_wants_volume(&both, None, P), None);
    // Already bound.
    let mut bound = both.clone();
    bound.spec.as_mut().unwrap().volume_name = Some("pvc-x".into());
    assert_eq!(claim_wants_volume(&bound, Some(&wffc), P), None);
}

#[test]
fn pv_is_pinned_to_the_zone_and_prebound_to_the_claim() {
    let c = claim(&[]);
    let pv = persistent_volume(
        &c,
        &class("WaitForFirstConsumer"),
        "us-east-1c",
        P,
        "s3",
        "/tmp/kubesim/volumes/",
    )
    .expect("pv");
    // Labelled with its kubesim's node prefix: only that kubesim reclaims it.
    assert_eq!(pv.metadata.labels.as_ref().unwrap()[SIM_NODE_LABEL], "s3");
    assert_eq!(pv.metadata.name.as_deref(), Some("pvc-1234-abcd"));
    assert_eq!(
        pv.metadata.annotations.as_ref().unwrap()[PROVISIONED_BY_ANNOTATION],
        P
    );
    let spec = pv.spec.as_ref().unwrap();
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "20Gi");
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteOncePod".to_string()][..])
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("gp3"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );
    let cr = spec.claim_ref.as_ref().unwrap();
    assert_eq!(
        (
            cr.namespace.as_deref(),
            cr.name.as_deref(),
            cr.uid.as_deref()
        ),
        (Some("apps"), Some("data-alpha-0"), Some("1234-abcd"))
    );
    assert_eq!(
        spec.host_path.as_ref().unwrap().path,
        "/tmp/kubesim/volumes/pvc-1234-abcd"
    );
    assert_eq!(pv_zone(&pv).as_deref(), Some("us-east-1c"));
    let terms = &spec
        .node_affinity
        .as_ref()
        .unwrap()
        .required
        .as_ref()
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    let e = &terms[0].match_expressions.as_ref().unwrap()[0];
    assert_eq!((e.key.as_str(), e.operator.as_str()), (ZONE_LABEL, "In"));
}

#[test]
fn only_our_released_delete_volumes_are_reclaimed() {
    let c = claim(&[]);
    let mut sc = class("WaitForFirstConsumer");
    sc.reclaim_policy = Some("Delete".into());
    let mut pv = persistent_volume(&c, &sc, "z", P, "sim", "/d").unwrap();
    assert!(!pv_reclaimable(&pv, P), "no phase yet");
    pv.status = Some(serde_json::from_value(json!({"phase": "Bound"})).unwrap());
    assert!(!pv_reclaimable(&pv, P));
    pv.status = Some(serde_json::from_value(json!({"phase": "Released"})).unwrap());
    assert!(pv_reclaimable(&pv, P));
    assert!(!pv_reclaimable(&pv, "other/provisioner"));
    pv.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
    assert!(!pv_reclaimable(&pv, P));
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "alpha-0", "namespace": "apps", "uid": "u-1", "generation": 1,
                     "labels": {"app": "alpha"}},
        "spec": {
            "nodeName": "sim-us-east-1a-0",
            "containers": [{
                "name": "celld",
                "image": "ghcr.io/ewhauser/celld@sha256:94f35ba6",
                "ports": [{"name": "public", "containerPort": 8080}],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "CELLD_NODE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "CELLD_ADVERTISE", "value": "$(POD_IP):8081"},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "LIT", "value": "$$(POD_IP) $(NOPE)"},
                ],
                "readinessProbe": {"httpGet": {"path": "/.well-known/celld/health", "port": "public"},
                                   "periodSeconds": 2, "failureThreshold": 3, "timeoutSeconds": 1},
            }],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }))
    .unwrap()
}

fn input(pod: &Pod, container: ContainerView, ready: bool) -> PodStatusInput<'_> {
    PodStatusInput {
        pod,
        host_ip: Ipv4Addr::new(127, 19, 0, 1),
        pod_ip: Some(Ipv4Addr::new(127, 20, 0, 9)),
        container,
        ever_started: true,
        restart_count: 2,
        last_state: None,
        container_id: Some("kubesim://u-1-3".into()),
        ready,
        now: ts("2026-11-29T10:00:05Z"),
    }
}

#[test]
fn running_ready_pod_status() {
    let p = pod();
    let started = ts("2026-11-29T10:00:00Z");
    let v = pod_status(&input(
        &p,
        ContainerView::Running {
            started_at: started,
        },
        true,
    ));
    let s: PodStatus = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(s.pod_ip.as_deref(), Some("127.20.0.9"));
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "127.20.0.9");
    assert_eq!(s.host_ip.as_deref(), Some("127.19.0.1"));
    assert!(s.start_time.is_some());
    let cond = |t: &str| {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    };
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(cond(t).as_deref(), Some("True"), "{t}");
    }
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.name, "celld");
    assert!(cs.ready);
    assert_eq!(cs.started, Some(true));
    assert_eq!(cs.restart_count, 2);
    assert_eq!(cs.image_id, "ghcr.io/ewhauser/celld@sha256:94f35ba6");
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .as_ref()
            .unwrap()
            .0,
        started
    );
    assert!(
        cs.container_id
            .as_deref()
            .unwrap()
            .starts_with("kubesim://")
    );
}

#[test]
fn waiting_pod_status_is_not_ready_and_pending_until_first_start() {
    let p = pod();
    let mut i = input(
        &p,
        ContainerView::Waiting {
            reason: "ErrImagePull".into(),
            message: "nope".into(),
        },
        false,
    );
    i.ever_started = false;
    i.restart_count = 0;
    let s: PodStatus = serde_json::from_value(pod_status(&i)).unwrap();
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let ready = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ErrImagePull")
    );
    assert!(!cs.ready);
    assert_eq!(cs.started, Some(false));

    // No sandbox yet (volume not bound): no IP, not ready to start containers.
    i.pod_ip = None;
    let s: PodStatus = serde_json::from_value(pod_status(&i)).unwrap();
    assert_eq!(s.pod_ip, None);
    let c = s
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodReadyToStartContainers")
        .unwrap();
    assert_eq!(c.status, "False");
}

#[test]
fn crash_loop_status_keeps_last_termination() {
    let p = pod();
    let mut i = input(
        &p,
        ContainerView::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "back-off".into(),
        },
        false,
    );
    i.last_state = Some(Terminated {
        exit_code: 1,
        signal: None,
        reason: "Error".into(),
        started_at: ts("2026-11-29T09:59:00Z"),
        finished_at: ts("2026-11-29T09:59:01Z"),
        container_id: "kubesim://u-1-2".into(),
    });
    let s: PodStatus = serde_json::from_value(pod_status(&i)).unwrap();
    assert_eq!(
        s.phase.as_deref(),
        Some("Running"),
        "a restarting container keeps the Pod Running"
    );
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    let term = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(term.exit_code, 1);
    assert_eq!(cs.restart_count, 2);
}

#[test]
fn transition_times_are_kept_when_status_does_not_change() {
    let mut p = pod();
    p.status = Some(
        serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T09:00:00Z"}],
        }))
        .unwrap(),
    );
    let v = pod_status(&input(
        &p,
        ContainerView::Running {
            started_at: ts("2026-11-29T09:00:00Z"),
        },
        true,
    ));
    let ready = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["lastTransitionTime"], "2026-11-29T09:00:00Z");
    let v = pod_status(&input(
        &p,
        ContainerView::Running {
            started_at: ts("2026-11-29T09:00:00Z"),
        },
        false,
    ));
    let ready = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["lastTransitionTime"], "2026-11-29T10:00:05Z");
}

#[test]
fn signatures_ignore_time_and_see_what_matters() {
    let p = pod();
    let a = pod_status(&input(
        &p,
        ContainerView::Running {
            started_at: ts("2026-11-29T10:00:00Z"),
        },
        true,
    ));
    let mut later = input(
        &p,
        ContainerView::Running {
            started_at: ts("2026-11-29T10:00:00Z"),
        },
        true,
    );
    later.now = ts("2026-11-29T11:00:00Z");
    let b = pod_status(&later);
    assert_eq!(desired_signature(&a), desired_signature(&b));
    let c = pod_status(&input(
        &p,
        ContainerView::Running {
            started_at: ts("2026-11-29T10:00:00Z"),
        },
        false,
    ));
    assert_ne!(desired_signature(&a), desired_signature(&c));
    // The API's copy after the write has the same signature.
    let written: PodStatus = serde_json::from_value(a.clone()).unwrap();
    assert_eq!(status_signature(Some(&written)), desired_signature(&a));
    // A condition someone else owns does not count.
    let mut other = written.clone();
    other.conditions.as_mut().unwrap().push(
        serde_json::from_value(json!({"type": "DisruptionTarget", "status": "True"})).unwrap(),
    );
    assert_eq!(status_signature(Some(&other)), desired_signature(&a));
}

#[test]
fn readiness_probe_from_spec_and_default() {
    let p = pod();
    let probe = readiness_probe(&p, 2);
    assert_eq!(probe.path, DEFAULT_HEALTH_PATH);
    assert_eq!(probe.port, 8080, "named port resolved");
    assert_eq!(probe.period_s, 2);
    assert_eq!(probe.failure_threshold, 3);
    let mut bare = p.clone();
    bare.spec.as_mut().unwrap().containers[0].readiness_probe = None;
    let probe = readiness_probe(&bare, 1);
    assert_eq!(
        (probe.path.as_str(), probe.port, probe.period_s),
        (DEFAULT_HEALTH_PATH, 8080, 1)
    );
}

#[test]
fn container_env_resolves_fields_and_references() {
    let p = pod();
    let c = &p.spec.as_ref().unwrap().containers[0];
    let env = container_env(
        &p,
        c,
        Ipv4Addr::new(127, 20, 0, 9),
        Ipv4Addr::new(127, 19, 0, 1),
        &EnvData::default(),
    )
    .unwrap();
    let m: BTreeMap<_, _> = env.into_iter().collect();
    assert_eq!(m["POD_IP"], "127.20.0.9");
    assert_eq!(m["CELLD_NODE"], "alpha-0");
    assert_eq!(m["CELLD_ADVERTISE"], "127.20.0.9:8081");
    assert_eq!(m["APP"], "alpha");
    assert_eq!(m["LIT"], "$(POD_IP) $(NOPE)");
}

#[test]
fn container_env_missing_secret_is_a_config_error() {
    let mut p = pod();
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.env.as_mut().unwrap().push(
        serde_json::from_value(json!({"name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret"}}}))
        .unwrap(),
    );
    let c = p.spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(env_sources(&c), vec![(true, "s3-creds".to_string())]);
    let ip = Ipv4Addr::new(127, 20, 0, 9);
    let err = container_env(&p, &c, ip, ip, &EnvData::default()).unwrap_err();
    assert_eq!(err, "secret \"s3-creds\" not found");
    let mut data = EnvData::default();
    data.secrets.insert(
        "s3-creds".into(),
        BTreeMap::from([("secret".into(), "k".into())]),
    );
    let env = container_env(&p, &c, ip, ip, &data).unwrap();
    assert!(env.contains(&("AWS_SECRET_ACCESS_KEY".to_string(), "k".to_string())));
}

#[test]
fn image_ids_are_stable_digests() {
    assert_eq!(image_id("repo/x@sha256:abc"), "repo/x@sha256:abc");
    let a = image_id("registry:5000/celld:0.6.0");
    assert!(a.starts_with("registry:5000/celld@sha256:"), "{a}");
    assert_eq!(a.len(), "registry:5000/celld@sha256:".len() + 64);
    assert_eq!(a, image_id("registry:5000/celld:0.6.0"));
    assert!(image_id("registry:5000/celld").starts_with("registry:5000/celld@sha256:"));
}

#[test]
fn glob_patterns() {
    assert!(glob_match("alpha-2", "alpha-2"));
    assert!(!glob_match("alpha-2", "alpha-20"));
    assert!(glob_match("alpha-*", "alpha-20"));
    assert!(glob_match("*-2", "beta-2"));
    assert!(glob_match("a?pha-*", "alpha-0"));
    assert!(!glob_match("beta-*", "alpha-0"));
    assert!(glob_match("*", ""));
}

#[test]
fn expand_references() {
    let vars = BTreeMap::from([("A".to_string(), "1".to_string())]);
    assert_eq!(expand("x$(A)y", &vars), "x1y");
    assert_eq!(expand("$$(A)", &vars), "$(A)");
    assert_eq!(expand("$(B)", &vars), "$(B)");
    assert_eq!(expand("cost $5", &vars), "cost $5");
    assert_eq!(expand("$(A", &vars), "$(A");
}
