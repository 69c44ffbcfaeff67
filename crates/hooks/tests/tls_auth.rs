//! TLS (caBundle sources, mTLS, wrong CA, HTTP/2), authorization headers and
//! endpointConfigs matching, against real local HTTPS servers with rcgen certificates.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, Version};
use metacontroller_api::hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, ConfigMapKeyReference, EndpointConfig, Hook,
    SecretKeyReference, ServiceReference, Webhook,
};
use metacontroller_hooks::{
    CallContext, HookClient, HookClientConfig, HookError, MemoryObjects, StaticHostResolver,
};
use serde_json::json;
use support::{hook, json, server_tls, server_tls_http1, start, webhook_mut, Ca, Server};

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "default/p",
};
const HOST: &str = "hooks.test";

struct Setup {
    client: HookClient,
    objects: Arc<MemoryObjects>,
    resolver: Arc<StaticHostResolver>,
}

fn setup() -> Setup {
    let objects = Arc::new(MemoryObjects::new());
    let resolver = Arc::new(StaticHostResolver::new());
    let client = HookClient::new(HookClientConfig {
        host_resolver: Some(resolver.clone()),
        secrets: Some(objects.clone()),
        config_maps: Some(objects.clone()),
        ..HookClientConfig::default()
    })
    .unwrap();
    Setup {
        client,
        objects,
        resolver,
    }
}

impl Setup {
    /// Routes `hooks.test:<port>` to the server and returns the https URL.
    fn route(&self, server: &Server, port: u16) -> String {
        self.resolver.insert(HOST, port, server.addr);
        if port == 443 {
            format!("https://{HOST}/sync")
        } else {
            format!("https://{HOST}:{port}/sync")
        }
    }

    async fn call(
        &self,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
    ) -> Result<serde_json::Value, HookError> {
        tokio::time::timeout(
            Duration::from_secs(20),
            self.client
                .call(&CTX, hook, endpoint_configs, &json!({"parent": {}})),
        )
        .await
        .expect("call did not finish in 20s")
    }
}

fn secret_ref(name: &str, key: Option<&str>) -> SecretKeyReference {
    SecretKeyReference {
        name: name.into(),
        namespace: Some("hooks".into()),
        key: key.map(str::to_owned),
    }
}

fn inline_ca(ca: &Ca) -> CaBundle {
    CaBundle {
        inline: Some(ca.pem()),
        ..CaBundle::default()
    }
}

async fn https_server(ca: &Ca, client_ca: Option<&Ca>) -> Server {
    let leaf = ca.server_leaf(&[HOST, "localhost"]);
    start(Some(server_tls(&leaf, client_ca)), |_, _| {
        json(StatusCode::OK, r#"{"ok":true}"#)
    })
    .await
}

fn expect_transport(result: Result<serde_json::Value, HookError>, what: &str) -> String {
    match result {
        Err(HookError::Transport { message, .. }) => {
            eprintln!("{what}: {message}");
            message
        }
        other => panic!("{what}: expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn inline_ca_bundle_verifies_server_and_negotiates_h2() {
    let ca = Ca::new("hook ca");
    let server = https_server(&ca, None).await;
    let s = setup();
    let mut hook = hook(&s.route(&server, 8443));
    webhook_mut(&mut hook).ca_bundle = Some(inline_ca(&ca));
    assert_eq!(s.call(&hook, &[]).await.unwrap(), json!({"ok": true}));
    assert_eq!(server.last().version, Version::HTTP_2);
}

#[tokio::test]
async fn http1_only_servers_are_reached_over_tls() {
    let ca = Ca::new("hook ca");
    let leaf = ca.server_leaf(&[HOST]);
    let server = start(Some(server_tls_http1(&leaf)), |_, _| {
        json(StatusCode::OK, r#"{"ok":true}"#)
    })
    .await;
    let s = setup();
    let mut hook = hook(&s.route(&server, 8443));
    webhook_mut(&mut hook).ca_bundle = Some(inline_ca(&ca));
    s.call(&hook, &[]).await.unwrap();
    assert_eq!(server.last().version, Version::HTTP_11);
}

#[tokio::test]
async fn https_service_target_verifies_the_service_host_name() {
    let ca = Ca::new("hook ca");
    let leaf = ca.server_leaf(&["hooks.team-a"]);
    let server = start(Some(server_tls(&leaf, None)), |_, _| {
        json(StatusCode::OK, r#"{"ok":true}"#)
    })
    .await;
    let s = setup();
    s.resolver.insert("hooks.team-a", 8443, server.addr);
    let mut hook = Hook {
        version: None,
        webhook: Some(Webhook {
            service: Some(ServiceReference {
                name: "hooks".into(),
                namespace: "team-a".into(),
                port: Some(8443),
                protocol: Some("https".into()),
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        }),
        ..Hook::default()
    };
    webhook_mut(&mut hook).ca_bundle = Some(inline_ca(&ca));
    assert_eq!(s.call(&hook, &[]).await.unwrap(), json!({"ok": true}));
    assert_eq!(server.last().path, "/sync");
}

#[tokio::test]
async fn private_ca_is_rejected_by_system_roots_and_by_a_wrong_ca() {
    let ca = Ca::new("hook ca");
    let server = https_server(&ca, None).await;
    let s = setup();
    let plain = hook(&s.route(&server, 8443));
    let message = expect_transport(s.call(&plain, &[]).await, "system roots");
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    let mut wrong = plain.clone();
    webhook_mut(&mut wrong).ca_bundle = Some(inline_ca(&Ca::new("other ca")));
    let message = expect_transport(s.call(&wrong, &[]).await, "wrong CA");
    assert!(message.to_lowercase().contains("certificate"), "{message}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn server_name_must_match_certificate() {
    let ca = Ca::new("hook ca");
    let leaf = ca.server_leaf(&["someone-else.test"]);
    let server = start(Some(server_tls(&leaf, None)), |_, _| {
        json(StatusCode::OK, "{}")
    })
    .await;
    let s = setup();
    let mut hook = hook(&s.route(&server, 8443));
    webhook_mut(&mut hook).ca_bundle = Some(inline_ca(&ca));
    let message = expect_transport(s.call(&hook, &[]).await, "name mismatch");
    assert!(message.contains("not valid for name"), "{message}");
}

#[tokio::test]
async fn ca_bundle_from_secret_and_config_map_with_default_and_custom_keys() {
    let ca = Ca::new("hook ca");
    let server = https_server(&ca, None).await;
    let s = setup();
    let url = s.route(&server, 8443);
    s.objects.set("hooks", "ca-secret", [("ca.crt", ca.pem())]);
    s.objects.set("hooks", "ca-cm", [("root.pem", ca.pem())]);

    let mut from_secret = hook(&url);
    webhook_mut(&mut from_secret).ca_bundle = Some(CaBundle {
        secret_ref: Some(secret_ref("ca-secret", None)),
        ..CaBundle::default()
    });
    s.call(&from_secret, &[]).await.unwrap();

    let mut from_cm = hook(&url);
    webhook_mut(&mut from_cm).ca_bundle = Some(CaBundle {
        config_map_ref: Some(ConfigMapKeyReference {
            name: "ca-cm".into(),
            namespace: Some("hooks".into()),
            key: Some("root.pem".into()),
        }),
        ..CaBundle::default()
    });
    s.call(&from_cm, &[]).await.unwrap();

    // Default key ca.crt is missing in the ConfigMap: a config error naming the key.
    let mut default_key = from_cm.clone();
    webhook_mut(&mut default_key)
        .ca_bundle
        .as_mut()
        .unwrap()
        .config_map_ref
        .as_mut()
        .unwrap()
        .key = None;
    let err = s.call(&default_key, &[]).await.unwrap_err();
    assert!(matches!(err, HookError::Config { .. }));
    assert!(err.to_string().contains("\"ca.crt\""), "{err}");

    // Two sources at once are refused.
    let mut both = from_secret.clone();
    webhook_mut(&mut both).ca_bundle.as_mut().unwrap().inline = Some(ca.pem());
    assert!(matches!(
        s.call(&both, &[]).await,
        Err(HookError::Config { .. })
    ));
}

#[tokio::test]
async fn rotated_ca_in_config_map_takes_effect_without_restart() {
    let ca = Ca::new("hook ca");
    let server = https_server(&ca, None).await;
    let s = setup();
    let mut hook = hook(&s.route(&server, 8443));
    webhook_mut(&mut hook).ca_bundle = Some(CaBundle {
        config_map_ref: Some(ConfigMapKeyReference {
            name: "ca".into(),
            namespace: Some("hooks".into()),
            key: None,
        }),
        ..CaBundle::default()
    });
    s.objects
        .set("hooks", "ca", [("ca.crt", Ca::new("stale").pem())]);
    expect_transport(s.call(&hook, &[]).await, "stale CA");
    s.objects.set("hooks", "ca", [("ca.crt", ca.pem())]);
    s.call(&hook, &[]).await.unwrap();
    assert_eq!(s.client.tls_client_count(), 2);
    // Unchanged material reuses the pooled client.
    s.call(&hook, &[]).await.unwrap();
    assert_eq!(s.client.tls_client_count(), 2);
}

#[tokio::test]
async fn mutual_tls_accepted_with_trusted_client_certificate() {
    let ca = Ca::new("hook ca");
    let client_ca = Ca::new("client ca");
    let server = https_server(&ca, Some(&client_ca)).await;
    let s = setup();
    let url = s.route(&server, 8443);
    let identity = client_ca.client_leaf("metacontroller");
    s.objects.set(
        "hooks",
        "client",
        [
            ("tls.crt", identity.cert_pem.clone()),
            ("tls.key", identity.key_pem.clone()),
        ],
    );
    s.objects.set(
        "hooks",
        "client-custom",
        [
            ("cert.pem", identity.cert_pem),
            ("key.pem", identity.key_pem),
        ],
    );

    let mut with_defaults = hook(&url);
    webhook_mut(&mut with_defaults).ca_bundle = Some(inline_ca(&ca));
    webhook_mut(&mut with_defaults).client_tls = Some(ClientTls {
        secret_ref: secret_ref("client", None),
        cert_key: None,
        private_key_key: None,
    });
    s.call(&with_defaults, &[]).await.unwrap();

    let mut custom_keys = with_defaults.clone();
    webhook_mut(&mut custom_keys).client_tls = Some(ClientTls {
        secret_ref: secret_ref("client-custom", None),
        cert_key: Some("cert.pem".into()),
        private_key_key: Some("key.pem".into()),
    });
    s.call(&custom_keys, &[]).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn mutual_tls_rejected_without_or_with_untrusted_client_certificate() {
    let ca = Ca::new("hook ca");
    let client_ca = Ca::new("client ca");
    let server = https_server(&ca, Some(&client_ca)).await;
    let s = setup();
    let url = s.route(&server, 8443);

    let mut no_cert = hook(&url);
    webhook_mut(&mut no_cert).ca_bundle = Some(inline_ca(&ca));
    let message = expect_transport(s.call(&no_cert, &[]).await, "no client cert");
    assert!(message.contains("CertificateRequired"), "{message}");

    let rogue = Ca::new("rogue ca").client_leaf("metacontroller");
    s.objects.set(
        "hooks",
        "rogue",
        [("tls.crt", rogue.cert_pem), ("tls.key", rogue.key_pem)],
    );
    let mut untrusted = no_cert.clone();
    webhook_mut(&mut untrusted).client_tls = Some(ClientTls {
        secret_ref: secret_ref("rogue", None),
        cert_key: None,
        private_key_key: None,
    });
    let message = expect_transport(s.call(&untrusted, &[]).await, "untrusted client cert");
    assert!(message.contains("UnknownCA"), "{message}");
    assert!(server.requests().is_empty());

    // A key that does not parse is a config error, not a handshake attempt.
    s.objects.set(
        "hooks",
        "broken",
        [
            ("tls.crt", client_ca.client_leaf("x").cert_pem),
            ("tls.key", "garbage".into()),
        ],
    );
    let mut broken = no_cert.clone();
    webhook_mut(&mut broken).client_tls = Some(ClientTls {
        secret_ref: secret_ref("broken", None),
        cert_key: None,
        private_key_key: None,
    });
    assert!(matches!(
        s.call(&broken, &[]).await,
        Err(HookError::Config { .. })
    ));
}

async fn http_server() -> Server {
    start(None, |_, _| json(StatusCode::OK, "{}")).await
}

fn authorization(type_: Option<&str>, secret: &str, key: &str) -> Authorization {
    Authorization {
        type_: type_.map(str::to_owned),
        secret_ref: secret_ref(secret, Some(key)),
    }
}

#[tokio::test]
async fn authorization_header_defaults_to_bearer() {
    let server = http_server().await;
    let s = setup();
    s.objects
        .set("hooks", "token", [("token", "  abc.def.ghi\n")]);
    let url = server.url("http", "/sync");

    let mut bearer = hook(&url);
    webhook_mut(&mut bearer).authorization = Some(authorization(None, "token", "token"));
    s.call(&bearer, &[]).await.unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Bearer abc.def.ghi")
    );

    let mut custom = hook(&url);
    webhook_mut(&mut custom).authorization = Some(authorization(Some("Token"), "token", "token"));
    s.call(&custom, &[]).await.unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Token abc.def.ghi")
    );

    for basic in ["Basic", "basic"] {
        let mut refused = hook(&url);
        webhook_mut(&mut refused).authorization =
            Some(authorization(Some(basic), "token", "token"));
        let err = s.call(&refused, &[]).await.unwrap_err();
        assert!(err.to_string().contains("use basicAuth"), "{err}");
    }

    let mut missing = hook(&url);
    webhook_mut(&mut missing).authorization = Some(authorization(None, "token", "nope"));
    let err = s.call(&missing, &[]).await.unwrap_err();
    assert!(err.to_string().contains("has no key \"nope\""), "{err}");
    let mut absent = hook(&url);
    webhook_mut(&mut absent).authorization = Some(authorization(None, "absent", "token"));
    let err = s.call(&absent, &[]).await.unwrap_err();
    assert!(err.to_string().contains("hooks/absent not found"), "{err}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn basic_auth_header_with_default_and_custom_keys() {
    let server = http_server().await;
    let s = setup();
    s.objects.set(
        "hooks",
        "basic",
        [
            ("username", "alice"),
            ("password", "wonder land"),
            ("u", "bob"),
            ("p", "pw"),
        ],
    );
    let url = server.url("http", "/sync");
    let mut defaults = hook(&url);
    webhook_mut(&mut defaults).basic_auth = Some(BasicAuth {
        secret_ref: secret_ref("basic", None),
        username_key: None,
        password_key: None,
    });
    s.call(&defaults, &[]).await.unwrap();
    // base64("alice:wonder land")
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Basic YWxpY2U6d29uZGVyIGxhbmQ=")
    );

    let mut custom = hook(&url);
    webhook_mut(&mut custom).basic_auth = Some(BasicAuth {
        secret_ref: secret_ref("basic", None),
        username_key: Some("u".into()),
        password_key: Some("p".into()),
    });
    s.call(&custom, &[]).await.unwrap();
    // base64("bob:pw")
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Basic Ym9iOnB3")
    );
}

#[tokio::test]
async fn authorization_and_basic_auth_are_mutually_exclusive() {
    let server = http_server().await;
    let s = setup();
    s.objects.set("hooks", "token", [("token", "t")]);
    let mut both = hook(&server.url("http", "/"));
    webhook_mut(&mut both).authorization = Some(authorization(None, "token", "token"));
    webhook_mut(&mut both).basic_auth = Some(BasicAuth {
        secret_ref: secret_ref("token", None),
        ..BasicAuth::default()
    });
    let err = s.call(&both, &[]).await.unwrap_err();
    assert!(err.to_string().contains("mutually exclusive"), "{err}");

    let entry = EndpointConfig {
        host: server.addr.to_string(),
        authorization: Some(authorization(None, "token", "token")),
        basic_auth: Some(BasicAuth {
            secret_ref: secret_ref("token", None),
            ..BasicAuth::default()
        }),
        ..EndpointConfig::default()
    };
    let err = s
        .call(&hook(&server.url("http", "/")), &[entry])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("endpointConfigs"), "{err}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn endpoint_configs_apply_by_host_with_default_port_rules() {
    let ca = Ca::new("hook ca");
    let server = https_server(&ca, None).await;
    let s = setup();
    s.objects
        .set("hooks", "token", [("token", "from-endpoint")]);
    let url = s.route(&server, 443);
    let entry = |host: &str| EndpointConfig {
        host: host.into(),
        ca_bundle: Some(inline_ca(&ca)),
        authorization: Some(authorization(None, "token", "token")),
        ..EndpointConfig::default()
    };

    for host in ["hooks.test", "HOOKS.Test", "hooks.test:443"] {
        s.call(&hook(&url), &[entry("elsewhere.test"), entry(host)])
            .await
            .unwrap_or_else(|err| panic!("{host}: {err}"));
        assert_eq!(
            server.last().header("authorization").as_deref(),
            Some("Bearer from-endpoint"),
            "{host}"
        );
    }
    // Explicit :443 in the URL is the same endpoint as none.
    let explicit = format!("https://{HOST}:443/sync");
    s.call(&hook(&explicit), &[entry("hooks.test")])
        .await
        .unwrap();

    // Entries for another port or host do not apply: no CA, so verification fails.
    for host in ["hooks.test:8443", "hooks.test:80", "other.test"] {
        expect_transport(s.call(&hook(&url), &[entry(host)]).await, host);
    }
}

#[tokio::test]
async fn per_hook_settings_override_matching_entry_as_a_whole() {
    let server = http_server().await;
    let s = setup();
    s.objects
        .set("hooks", "token", [("token", "from-endpoint")]);
    s.objects
        .set("hooks", "basic", [("username", "u"), ("password", "p")]);
    let url = server.url("http", "/sync");
    let entry = EndpointConfig {
        host: server.addr.to_string(),
        authorization: Some(authorization(None, "token", "token")),
        ..EndpointConfig::default()
    };

    s.call(&hook(&url), std::slice::from_ref(&entry))
        .await
        .unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Bearer from-endpoint")
    );

    // The hook's own basicAuth replaces the entry (no merge into one header set).
    let mut own_basic = hook(&url);
    webhook_mut(&mut own_basic).basic_auth = Some(BasicAuth {
        secret_ref: secret_ref("basic", None),
        ..BasicAuth::default()
    });
    s.call(&own_basic, std::slice::from_ref(&entry))
        .await
        .unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Basic dTpw")
    );

    // A hook that sets only a caBundle also drops the entry's authorization.
    let mut own_ca = hook(&url);
    webhook_mut(&mut own_ca).ca_bundle = Some(inline_ca(&Ca::new("unused for http")));
    s.call(&own_ca, std::slice::from_ref(&entry)).await.unwrap();
    assert!(server.last().header("authorization").is_none());
}

#[tokio::test]
async fn changed_token_secret_takes_effect_on_next_call() {
    let server = http_server().await;
    let s = setup();
    let mut hook = hook(&server.url("http", "/"));
    webhook_mut(&mut hook).authorization = Some(authorization(None, "token", "token"));
    s.objects.set("hooks", "token", [("token", "first")]);
    s.call(&hook, &[]).await.unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Bearer first")
    );
    s.objects.set("hooks", "token", [("token", "second")]);
    s.call(&hook, &[]).await.unwrap();
    assert_eq!(
        server.last().header("authorization").as_deref(),
        Some("Bearer second")
    );
}

#[tokio::test]
async fn secret_references_need_a_namespace_and_a_source() {
    let server = http_server().await;
    let s = setup();
    let mut hook = hook(&server.url("http", "/"));
    webhook_mut(&mut hook).authorization = Some(Authorization {
        type_: None,
        secret_ref: SecretKeyReference {
            name: "token".into(),
            namespace: None,
            key: Some("token".into()),
        },
    });
    let err = s.call(&hook, &[]).await.unwrap_err();
    assert!(err.to_string().contains("namespace is required"), "{err}");

    let no_sources = HookClient::new(HookClientConfig::default()).unwrap();
    webhook_mut(&mut hook).authorization = Some(authorization(None, "token", "token"));
    let err = no_sources
        .call::<_, serde_json::Value>(&CTX, &hook, &[], &json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no Secret source"), "{err}");
}
