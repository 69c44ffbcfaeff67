//! Malformed requests get 4xx Status answers and never take the server down.

mod common;

use common::*;
use serde_json::json;

/// (method, path, headers, body)
type Case<'a> = (
    &'a str,
    String,
    Vec<(&'a str, &'a str)>,
    Option<serde_json::Value>,
);

#[tokio::test]
async fn malformed_requests_are_client_errors() {
    let (_s, client) = start().await;
    within(30, async {
        let cms = "/api/v1/namespaces/default/configmaps";
        let json_ct = [("content-type", "application/json")];
        let cases: Vec<Case> = vec![
            ("POST", cms.into(), json_ct.to_vec(), Some(json!([1, 2]))),
            (
                "POST",
                cms.into(),
                json_ct.to_vec(),
                Some(json!({"metadata": "x"})),
            ),
            (
                "POST",
                cms.into(),
                json_ct.to_vec(),
                Some(json!({"metadata": {"name": "a", "labels": 5}})),
            ),
            (
                "POST",
                cms.into(),
                json_ct.to_vec(),
                Some(json!({"metadata": {"name": "x".repeat(300)}})),
            ),
            (
                "POST",
                cms.into(),
                json_ct.to_vec(),
                Some(json!({"apiVersion": "apps/v1", "metadata": {"name": "a"}})),
            ),
            (
                "POST",
                cms.into(),
                vec![("content-type", "application/vnd.kubernetes.protobuf")],
                Some(json!("k8s")),
            ),
            (
                "GET",
                format!("{cms}?labelSelector=a%20b%3Dc"),
                vec![],
                None,
            ),
            ("GET", format!("{cms}?fieldSelector=nonsense"), vec![], None),
            ("GET", format!("{cms}?continue=%%%"), vec![], None),
            ("GET", format!("{cms}?limit=abc"), vec![], None),
            (
                "GET",
                format!("{cms}?watch=1&resourceVersion=abc"),
                vec![],
                None,
            ),
            (
                "POST",
                format!("{cms}?dryRun=Maybe"),
                json_ct.to_vec(),
                Some(json!({"metadata": {"name": "d"}})),
            ),
            (
                "PATCH",
                format!("{cms}/missing"),
                vec![("content-type", "application/merge-patch+json")],
                Some(json!({})),
            ),
            (
                "PATCH",
                format!("{cms}/x"),
                vec![("content-type", "text/plain")],
                Some(json!({})),
            ),
            ("DELETE", format!("{cms}/missing"), vec![], None),
            (
                "DELETE",
                format!("{cms}/x"),
                json_ct.to_vec(),
                Some(json!({"propagationPolicy": "Sideways"})),
            ),
            (
                "POST",
                format!("{cms}/named"),
                json_ct.to_vec(),
                Some(json!({})),
            ),
            ("GET", "/apis/example.com/v1/nothing".into(), vec![], None),
            (
                "PUT",
                format!("{cms}/x/status"),
                json_ct.to_vec(),
                Some(json!({})),
            ),
        ];
        // An object for the patch/delete cases that need one.
        let (code, _, _) = raw(
            &client,
            "POST",
            cms,
            &json_ct,
            Some(json!({"metadata": {"name": "x"}})),
        )
        .await;
        assert_eq!(code, 201);
        for (method, path, headers, body) in cases {
            let (code, body, _) = raw(&client, method, &path, &headers, body).await;
            assert!((400..500).contains(&code), "{method} {path}: {code} {body}");
            if code != 404 || body.is_object() {
                assert_eq!(body["kind"], "Status", "{method} {path}: {body}");
            }
        }
        // A JSON patch turning the object into a scalar is refused too.
        let (code, _, _) = raw(
            &client,
            "PATCH",
            &format!("{cms}/x"),
            &[("content-type", "application/json-patch+json")],
            Some(json!([{"op": "replace", "path": "", "value": 3}])),
        )
        .await;
        assert!((400..500).contains(&code), "{code}");
        let (code, _, _) = raw(&client, "GET", &format!("{cms}/x"), &[], None).await;
        assert_eq!(code, 200, "server still serves");
    })
    .await;
}
