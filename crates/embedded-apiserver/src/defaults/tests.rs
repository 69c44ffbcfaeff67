use super::*;
use serde_json::json;

fn run(group: &str, kind: &str, mut obj: Value) -> Value {
    let mut alloc = RangeAllocator::default();
    apply_builtin_defaults(group, "v1", kind, &mut obj, &mut alloc).unwrap();
    obj
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25",
                    "ports": [{"containerPort": 80}]}]}}}})
}

#[test]
fn deployment_defaults_match_kube_apiserver() {
    let d = run("apps", "Deployment", deployment());
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let t = &spec["template"];
    assert_eq!(t["metadata"]["creationTimestamp"], Value::Null);
    assert!(t["metadata"]
        .as_object()
        .unwrap()
        .contains_key("creationTimestamp"));
    let ps = &t["spec"];
    assert_eq!(ps["restartPolicy"], "Always");
    assert_eq!(ps["dnsPolicy"], "ClusterFirst");
    assert_eq!(ps["schedulerName"], "default-scheduler");
    assert_eq!(ps["terminationGracePeriodSeconds"], 30);
    assert_eq!(ps["securityContext"], json!({}));
    // Pod-only defaults do not reach templates.
    assert!(ps.get("enableServiceLinks").is_none());
    assert!(ps.get("serviceAccountName").is_none());
    let c = &ps["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["resources"], json!({}));
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(d["status"], json!({}));
}

#[test]
fn defaults_are_idempotent_and_keep_user_values() {
    let mut d = deployment();
    d["spec"]["replicas"] = json!(0);
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    d["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
    let once = run("apps", "Deployment", d);
    assert_eq!(once["spec"]["replicas"], 0);
    assert_eq!(once["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(
        once["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Never"
    );
    let twice = run("apps", "Deployment", once.clone());
    assert_eq!(once, twice);
}

#[test]
fn image_pull_policy_follows_the_tag() {
    let mut pod = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": [
        {"name": "a", "image": "nginx"},
        {"name": "b", "image": "nginx:latest"},
        {"name": "c", "image": "nginx:1.0"},
        {"name": "d", "image": "nginx@sha256:0123"}]}});
    pod = run("", "Pod", pod);
    let policies: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["imagePullPolicy"].as_str().unwrap())
        .collect();
    assert_eq!(
        policies,
        vec!["Always", "Always", "IfNotPresent", "IfNotPresent"]
    );
}

#[test]
fn pod_gets_pod_only_and_admission_defaults() {
    let pod = run(
        "",
        "Pod",
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": [
            {"name": "a", "image": "busybox:1", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}),
    );
    let s = &pod["spec"];
    assert_eq!(s["enableServiceLinks"], true);
    assert_eq!(s["serviceAccountName"], "default");
    assert_eq!(s["serviceAccount"], "default");
    assert_eq!(s["priority"], 0);
    assert_eq!(s["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(
        s["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ])
    );
    // Requests default to limits on Pods.
    assert_eq!(
        s["containers"][0]["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    let mut created = pod.clone();
    prepare_for_create("", "v1", "Pod", &mut created);
    assert_eq!(
        created["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"})
    );
}

#[test]
fn pod_probes_volumes_and_env_refs() {
    let pod = run(
        "",
        "Pod",
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {
            "containers": [{"name": "a", "image": "x:1",
                "livenessProbe": {"httpGet": {"port": 8080}},
                "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}],
            "volumes": [{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "c"}},
                        {"name": "sec", "secret": {"secretName": "s", "defaultMode": 256}}]}}),
    );
    let probe = &pod["spec"]["containers"][0]["livenessProbe"];
    assert_eq!(
        probe,
        &json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
                "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(
        pod["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"],
        "v1"
    );
    let vols = &pod["spec"]["volumes"];
    assert_eq!(vols[0], json!({"name": "scratch", "emptyDir": {}}));
    assert_eq!(vols[1]["configMap"]["defaultMode"], 420);
    assert_eq!(vols[2]["secret"]["defaultMode"], 256);
}

#[test]
fn service_defaults_and_cluster_ip_allocation() {
    let mut alloc = RangeAllocator::default();
    let mut svc = json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
    apply_builtin_defaults("", "v1", "Service", &mut svc, &mut alloc).unwrap();
    let s = &svc["spec"];
    assert_eq!(s["type"], "ClusterIP");
    assert_eq!(s["sessionAffinity"], "None");
    assert_eq!(s["clusterIP"], "10.96.0.2");
    assert_eq!(s["clusterIPs"], json!(["10.96.0.2"]));
    assert_eq!(s["ipFamilies"], json!(["IPv4"]));
    assert_eq!(s["ipFamilyPolicy"], "SingleStack");
    assert_eq!(s["internalTrafficPolicy"], "Cluster");
    assert!(s.get("externalTrafficPolicy").is_none());
    assert_eq!(
        s["ports"],
        json!([{"port": 80, "protocol": "TCP", "targetPort": 80},
               {"port": 53, "protocol": "UDP", "targetPort": "dns"}])
    );
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));

    // Re-defaulting the stored object keeps its IP (owned by the same Service).
    let again = svc.clone();
    let mut again2 = again.clone();
    apply_builtin_defaults("", "v1", "Service", &mut again2, &mut alloc).unwrap();
    assert_eq!(again, again2);

    // A second Service gets the next address; asking for a taken one fails.
    let mut other = json!({"metadata": {"name": "b", "namespace": "default"}, "spec": {"ports": [{"port": 1}]}});
    apply_builtin_defaults("", "v1", "Service", &mut other, &mut alloc).unwrap();
    assert_eq!(other["spec"]["clusterIP"], "10.96.0.3");
    let mut clash = json!({"metadata": {"name": "c", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.2", "ports": [{"port": 1}]}});
    let err = apply_builtin_defaults("", "v1", "Service", &mut clash, &mut alloc).unwrap_err();
    assert_eq!(err.field, "spec.clusterIPs");
    assert!(err.to_string().contains("already allocated"), "{err}");
    let mut outside = json!({"metadata": {"name": "d", "namespace": "default"},
        "spec": {"clusterIP": "192.168.0.1", "ports": [{"port": 1}]}});
    let err = apply_builtin_defaults("", "v1", "Service", &mut outside, &mut alloc).unwrap_err();
    assert!(err.to_string().contains("10.96.0.0/12"), "{err}");

    // Releasing frees the address for others.
    alloc.release("default/web");
    apply_builtin_defaults("", "v1", "Service", &mut clash, &mut alloc).unwrap();
    assert_eq!(clash["spec"]["clusterIP"], "10.96.0.2");
}

#[test]
fn headless_external_name_and_node_port_services() {
    let mut alloc = RangeAllocator::default();
    let mut headless = json!({"metadata": {"name": "h", "namespace": "d"},
        "spec": {"clusterIP": "None", "selector": {"a": "b"}, "ports": [{"port": 80}]}});
    apply_builtin_defaults("", "v1", "Service", &mut headless, &mut alloc).unwrap();
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(headless["spec"]["ipFamilyPolicy"], "SingleStack");

    let mut headless_no_sel = json!({"metadata": {"name": "h2", "namespace": "d"},
        "spec": {"clusterIP": "None"}});
    apply_builtin_defaults("", "v1", "Service", &mut headless_no_sel, &mut alloc).unwrap();
    assert_eq!(
        headless_no_sel["spec"]["ipFamilyPolicy"],
        "RequireDualStack"
    );

    let mut ext = json!({"metadata": {"name": "e", "namespace": "d"},
        "spec": {"type": "ExternalName", "externalName": "example.com"}});
    apply_builtin_defaults("", "v1", "Service", &mut ext, &mut alloc).unwrap();
    assert!(ext["spec"].get("clusterIP").is_none());
    assert!(ext["spec"].get("internalTrafficPolicy").is_none());
    assert_eq!(ext["spec"]["sessionAffinity"], "None");

    let mut np = json!({"metadata": {"name": "n", "namespace": "d"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 31000}]}});
    apply_builtin_defaults("", "v1", "Service", &mut np, &mut alloc).unwrap();
    assert_eq!(np["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(np["spec"]["ports"][0]["nodePort"], 30000);
    assert_eq!(np["spec"]["ports"][1]["nodePort"], 31000);

    let mut lb = json!({"metadata": {"name": "l", "namespace": "d"},
        "spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}});
    apply_builtin_defaults("", "v1", "Service", &mut lb, &mut alloc).unwrap();
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    assert_eq!(
        lb["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    assert_eq!(lb["spec"]["ports"][0]["nodePort"], 30001);
}

#[test]
fn service_update_keeps_allocations() {
    let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"],
        "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
        "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
    let mut new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
    preserve_service_allocations(&old, &mut new);
    assert_eq!(new["spec"]["clusterIP"], "10.96.0.9");
    assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
}

#[test]
fn statefulset_daemonset_replicaset_defaults() {
    let tmpl = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    let sts = run(
        "apps",
        "StatefulSet",
        json!({"spec": {"serviceName": "s", "selector": {}, "template": tmpl,
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    let s = &sts["spec"];
    assert_eq!(s["replicas"], 1);
    assert_eq!(s["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        s["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(s["revisionHistoryLimit"], 10);
    assert_eq!(
        s["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    let pvc = &s["volumeClaimTemplates"][0];
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"], json!({"phase": "Pending"}));
    assert_eq!(
        sts["status"],
        json!({"replicas": 0, "availableReplicas": 0})
    );

    // An explicit RollingUpdate without rollingUpdate stays without it.
    let sts2 = run(
        "apps",
        "StatefulSet",
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}, "template": tmpl}}),
    );
    assert_eq!(
        sts2["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate"})
    );

    let ds = run("apps", "DaemonSet", json!({"spec": {"template": tmpl}}));
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(ds["status"]["numberReady"], 0);

    let rs = run("apps", "ReplicaSet", json!({"spec": {"template": tmpl}}));
    assert_eq!(rs["spec"]["replicas"], 1);
    assert_eq!(rs["status"], json!({"replicas": 0}));
    assert_eq!(
        rs["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
}

#[test]
fn job_and_cronjob_defaults() {
    let tmpl =
        json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}});
    let job = run(
        "batch",
        "Job",
        json!({"metadata": {"name": "j", "namespace": "d", "uid": "u-1"}, "spec": {"template": tmpl}}),
    );
    let s = &job["spec"];
    assert_eq!(s["completions"], 1);
    assert_eq!(s["parallelism"], 1);
    assert_eq!(s["backoffLimit"], 6);
    assert_eq!(s["completionMode"], "NonIndexed");
    assert_eq!(s["suspend"], false);
    assert!(s.get("podReplacementPolicy").is_none());
    assert_eq!(s["template"]["spec"]["restartPolicy"], "Never");

    // Parallelism alone leaves completions unset.
    let par = run(
        "batch",
        "Job",
        json!({"spec": {"parallelism": 3, "template": tmpl}}),
    );
    assert!(par["spec"].get("completions").is_none());

    let mut created = job.clone();
    prepare_for_create("batch", "v1", "Job", &mut created);
    assert_eq!(
        created["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    assert_eq!(
        created["spec"]["template"]["metadata"]["labels"],
        json!({"job-name": "j", "batch.kubernetes.io/job-name": "j",
               "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1"})
    );
    // Defaulting on read then copies template labels to the Job.
    let mut alloc = RangeAllocator::default();
    apply_builtin_defaults("batch", "v1", "Job", &mut created, &mut alloc).unwrap();
    assert_eq!(created["metadata"]["labels"]["job-name"], "j");

    let cj = run(
        "batch",
        "CronJob",
        json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tmpl}}}}),
    );
    let s = &cj["spec"];
    assert_eq!(s["concurrencyPolicy"], "Allow");
    assert_eq!(s["suspend"], false);
    assert_eq!(s["successfulJobsHistoryLimit"], 3);
    assert_eq!(s["failedJobsHistoryLimit"], 1);
    assert_eq!(
        s["jobTemplate"]["metadata"],
        json!({"creationTimestamp": null})
    );
    // Job defaults are not applied inside a job template.
    assert!(s["jobTemplate"]["spec"].get("backoffLimit").is_none());
    assert_eq!(
        s["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
}

#[test]
fn secret_type_and_string_data() {
    let s = run(
        "",
        "Secret",
        json!({"metadata": {"name": "s"}, "data": {"a": "b2xk", "b": "b2xk"}, "stringData": {"b": "new", "c": "x y"}}),
    );
    assert_eq!(s["type"], "Opaque");
    assert!(s.get("stringData").is_none());
    assert_eq!(s["data"], json!({"a": "b2xk", "b": "bmV3", "c": "eCB5"}));
    let typed = run("", "Secret", json!({"type": "kubernetes.io/tls"}));
    assert_eq!(typed["type"], "kubernetes.io/tls");
}

#[test]
fn namespace_defaults_and_create() {
    let mut ns = run("", "Namespace", json!({"metadata": {"name": "team-a"}}));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    assert_eq!(ns["status"], json!({"phase": "Active"}));
    prepare_for_create("", "v1", "Namespace", &mut ns);
    assert_eq!(ns["spec"], json!({"finalizers": ["kubernetes"]}));
    // The label always tracks the name, even if a client set something else.
    let ns2 = run(
        "",
        "Namespace",
        json!({"metadata": {"name": "b", "labels": {"kubernetes.io/metadata.name": "x"}}}),
    );
    assert_eq!(
        ns2["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "b"
    );
}

#[test]
fn configmap_is_untouched_and_rbac_defaults() {
    let cm = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
    assert_eq!(run("", "ConfigMap", cm.clone()), cm);
    let rb = run(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        json!({"roleRef": {"kind": "Role", "name": "r"},
               "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
    );
    assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    assert!(rb["subjects"][1].get("apiGroup").is_none());
    let role = run(
        "rbac.authorization.k8s.io",
        "Role",
        json!({"metadata": {"name": "r"}}),
    );
    assert_eq!(role["rules"], Value::Null);
    assert!(role.as_object().unwrap().contains_key("rules"));
}

#[test]
fn non_object_input_is_ignored() {
    let mut alloc = RangeAllocator::default();
    let mut v = json!("not an object");
    apply_builtin_defaults("apps", "v1", "Deployment", &mut v, &mut alloc).unwrap();
    let mut d = json!({"spec": "garbage"});
    apply_builtin_defaults("apps", "v1", "Deployment", &mut d, &mut alloc).unwrap();
    assert_eq!(d["spec"], "garbage");
}

#[test]
fn allocator_ranges_at_the_top_of_the_address_space() {
    let mut a = RangeAllocator::new(std::net::Ipv4Addr::new(255, 0, 0, 0), 8);
    assert_eq!(a.cidr(), "255.0.0.0/8");
    assert_eq!(a.allocate_ip("d/x").unwrap(), "255.0.0.2");
    assert!(a.reserve_ip("255.255.255.255", "d/y").is_err());
    assert!(a.reserve_ip("255.1.2.3", "d/y").is_ok());
    assert!(a.reserve_ip("not-an-ip", "d/y").is_err());
}

#[test]
fn small_ranges_fill_up_with_an_error() {
    let mut a = RangeAllocator::new(std::net::Ipv4Addr::new(10, 0, 0, 0), 30);
    // A /30 has .1 and .2 usable; .1 is kept for the kubernetes Service.
    assert_eq!(a.allocate_ip("d/a").unwrap(), "10.0.0.2");
    assert_eq!(a.allocate_ip("d/b").unwrap(), "10.0.0.1");
    assert!(a.allocate_ip("d/c").is_err());
    a.release("d/a");
    assert_eq!(a.allocate_ip("d/c").unwrap(), "10.0.0.2");
}

#[test]
fn admission_tolerations_and_priority_classes() {
    let pod = run(
        "",
        "Pod",
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
            "containers": [{"name": "a", "image": "i:1"}]}}),
    );
    // An empty-key NoExecute toleration already covers both taints.
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"operator": "Exists", "effect": "NoExecute"}])
    );
    assert_eq!(pod["spec"]["priority"], 2_000_001_000);
    let partial = run(
        "",
        "Pod",
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            "containers": [{"name": "a", "image": "i:1"}]}}),
    );
    let keys: Vec<&str> = partial["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        vec![
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable"
        ]
    );
}

#[test]
fn crd_defaults() {
    let crd = run(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true}]}}),
    );
    assert_eq!(crd["spec"]["names"]["singular"], "widget");
    assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));
    assert_eq!(
        crd["status"],
        json!({"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"]})
    );
}
