//! The request sequence against kube's mock service: each test plays the API server, so
//! it sees every request in order and answers it with what a server would send.

use std::collections::BTreeMap;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle};

use super::*;

const NAME: &str = "heddle-0123456789abcdef0123456789abcdef01234567";
const JOBS: &str = "/apis/batch/v1/namespaces/ml/jobs";

fn engine() -> (Kubernetes, Handle<Request<Body>, Response<Body>>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let settings = KubeCluster {
        namespace: "ml".into(),
        context: None,
        image: "registry.lab/heddle@sha256:".to_string() + &"e".repeat(64),
        resource_names: BTreeMap::from([("gpu".into(), "nvidia.com/gpu".into())]),
    };
    let client = Client::new(service, "ml");
    let k = Kubernetes::with_client(settings, "k8s", "run-1", "s3://team/heddle", client);
    (k, handle)
}

fn submission() -> Submission {
    Submission {
        name: NAME.into(),
        comment: "run run-1 probe[x=1]".into(),
        label: "probe[x=1]".into(),
        resources: BTreeMap::from([("gpu".into(), 1)]),
        timeout: Some(Duration::from_secs(60)),
        worker: "heddle".into(),
        key: "0123456789abcdef".repeat(4),
    }
}

/// A Job as the server returns it, with `status`.
fn job(version: &str, status: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": NAME, "namespace": "ml", "resourceVersion": version },
        "spec": { "template": { "spec": { "containers": [] } } },
        "status": status,
    })
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn running() -> Value {
    json!({ "active": 1 })
}

fn complete() -> Value {
    json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] })
}

fn failed() -> Value {
    json!({ "failed": 1, "conditions": [
        { "type": "Failed", "status": "True", "reason": "DeadlineExceeded" }
    ] })
}

/// The next request: it must be `method` on `uri`; its body (JSON, or Null), answered
/// with `code` and `answer` (a JSON value, or lines of watch events).
async fn serve(
    handle: &mut Handle<Request<Body>, Response<Body>>,
    method: &str,
    uri: &str,
    code: u16,
    answer: Vec<u8>,
) -> Value {
    let (req, reply) = handle.next_request().await.expect("a request");
    assert_eq!(
        (req.method().as_str(), req.uri().to_string().as_str()),
        (method, uri)
    );
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let body = match bytes.is_empty() {
        true => Value::Null,
        false => serde_json::from_slice(&bytes).unwrap(),
    };
    reply.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(answer))
            .unwrap(),
    );
    body
}

fn bytes(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

/// Watch events, one JSON object a line, as a watch response streams them.
fn events(events: &[(&str, Value)]) -> Vec<u8> {
    events
        .iter()
        .flat_map(|(kind, object)| {
            let mut line = bytes(json!({ "type": kind, "object": object }));
            line.push(b'\n');
            line
        })
        .collect()
}

fn list_uri() -> String {
    format!("{JOBS}?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dheddle")
}

fn watch_uri(version: &str) -> String {
    format!(
        "{JOBS}?&watch=true&timeoutSeconds=290&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dheddle&allowWatchBookmarks=true&resourceVersion={version}"
    )
}

#[tokio::test]
async fn a_submission_creates_the_job_and_a_resubmission_adopts_the_live_one() {
    let (k, mut server) = engine();
    let s = submission();
    let (got, body) = tokio::join!(k.submit(&s), async {
        let created = bytes(job("1", Value::Null));
        serve(&mut server, "POST", &format!("{JOBS}?"), 201, created).await
    });
    let want = job_manifest(&k.pod_job(&s));
    assert_eq!(body, want, "the body is the manifest");
    assert_eq!(body["spec"]["backoffLimit"], 0);
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"],
        json!({ "nvidia.com/gpu": "1" })
    );
    assert_eq!(
        got.unwrap(),
        Submitted {
            id: NAME.into(),
            adopted: false,
            state: JobState::Submitted
        }
    );

    let (got, ()) = tokio::join!(k.submit(&s), async {
        let exists = status(409, "AlreadyExists", "jobs.batch \"x\" already exists");
        serve(&mut server, "POST", &format!("{JOBS}?"), 409, bytes(exists)).await;
        let live = bytes(job("7", running()));
        serve(&mut server, "GET", &format!("{JOBS}/{NAME}"), 200, live).await;
    });
    assert_eq!(
        got.unwrap(),
        Submitted {
            id: NAME.into(),
            adopted: true,
            state: JobState::Running { node: None }
        }
    );
}

#[tokio::test]
async fn an_ended_job_in_the_way_is_deleted_and_created_again() {
    let (k, mut server) = engine();
    let s = submission();
    let (got, delete_body) = tokio::join!(k.submit(&s), async {
        let exists = status(409, "AlreadyExists", "already exists");
        serve(&mut server, "POST", &format!("{JOBS}?"), 409, bytes(exists)).await;
        let ended = bytes(job("7", failed()));
        serve(&mut server, "GET", &format!("{JOBS}/{NAME}"), 200, ended).await;
        let uri = format!("{JOBS}/{NAME}?");
        let body = serve(&mut server, "DELETE", &uri, 200, bytes(job("8", failed()))).await;
        let created = bytes(job("9", Value::Null));
        serve(&mut server, "POST", &format!("{JOBS}?"), 201, created).await;
        body
    });
    assert_eq!(delete_body, json!({ "propagationPolicy": "Background" }));
    assert!(!got.unwrap().adopted);
}

#[tokio::test]
async fn status_comes_from_one_list_then_the_watch_and_a_410_relists() {
    let (k, mut server) = engine();
    let names = vec![NAME.to_string(), "heddle-unknown".to_string()];
    let list = |version: &str, status: Value| {
        bytes(json!({
            "apiVersion": "batch/v1", "kind": "JobList",
            "metadata": { "resourceVersion": version },
            "items": [job(version, status)],
        }))
    };
    let (rows, _) = tokio::join!(k.query(&names), async {
        serve(&mut server, "GET", &list_uri(), 200, list("100", running())).await
    });
    let state = |rows: Vec<JobRow>| {
        assert_eq!(rows.len(), 1, "a job never seen is not listed");
        rows[0].state.clone()
    };
    assert_eq!(state(rows.unwrap()), JobState::Running { node: None });

    // The watch starts from the list's version; its events update the answer.
    let modified = events(&[("MODIFIED", job("101", complete()))]);
    serve(&mut server, "GET", &watch_uri("100"), 200, modified).await;
    // The server closed the watch; it reopens from the last version seen, which also
    // says the event before was taken in.
    let (req, reply) = server.next_request().await.unwrap();
    assert_eq!(req.uri().to_string(), watch_uri("101"));
    let ended = JobState::Ended {
        state: "COMPLETED".into(),
        node: None,
    };
    assert_eq!(state(k.query(&names).await.unwrap()), ended);
    // The queries cost no request: the next one the server sees is the watch's.
    let gone = status(410, "Expired", "too old resource version: 101 (300)");
    reply.send_response(Response::new(Body::from(events(&[("ERROR", gone)]))));
    serve(&mut server, "GET", &list_uri(), 200, list("300", failed())).await;
    let (req, _reply) = server.next_request().await.unwrap();
    assert_eq!(req.uri().to_string(), watch_uri("300"));
    let failed = JobState::Ended {
        state: "FAILED (DeadlineExceeded)".into(),
        node: None,
    };
    assert_eq!(state(k.query(&names).await.unwrap()), failed);
}

#[tokio::test]
async fn the_watch_telling_of_a_replaced_job_s_deletion_leaves_its_successor_alone() {
    let (k, mut server) = engine();
    let with_uid = |uid: &str, version: &str, status: Value| {
        let mut j = job(version, status);
        j["metadata"]["uid"] = json!(uid);
        j
    };
    let names = vec![NAME.to_string()];
    let list = bytes(json!({
        "apiVersion": "batch/v1", "kind": "JobList",
        "metadata": { "resourceVersion": "10" },
        "items": [with_uid("old", "10", failed())],
    }));
    let (rows, _) = tokio::join!(k.query(&names), async {
        serve(&mut server, "GET", &list_uri(), 200, list).await
    });
    assert_eq!(rows.unwrap().len(), 1);
    let (watch, watch_reply) = server.next_request().await.unwrap();
    assert_eq!(watch.uri().to_string(), watch_uri("10"));

    let s = submission();
    let (got, ()) = tokio::join!(k.submit(&s), async {
        let exists = bytes(status(409, "AlreadyExists", "already exists"));
        serve(&mut server, "POST", &format!("{JOBS}?"), 409, exists).await;
        let old = bytes(with_uid("old", "10", failed()));
        serve(&mut server, "GET", &format!("{JOBS}/{NAME}"), 200, old).await;
        let uri = format!("{JOBS}/{NAME}?");
        let deleted = bytes(with_uid("old", "11", failed()));
        serve(&mut server, "DELETE", &uri, 200, deleted).await;
        let created = bytes(with_uid("new", "12", Value::Null));
        serve(&mut server, "POST", &format!("{JOBS}?"), 201, created).await;
    });
    assert!(!got.unwrap().adopted);
    // The worker of the new Job stores its outcome under a tag of its own.
    assert_eq!(k.outcome_tag(NAME), format!("kubernetes:k8s:{NAME}:new"));
    let pending = JobState::Pending {
        reason: "not yet scheduled".into(),
    };
    assert_eq!(k.query(&names).await.unwrap()[0].state, pending);

    let old_gone = events(&[("DELETED", with_uid("old", "11", failed()))]);
    watch_reply.send_response(Response::new(Body::from(old_gone)));
    let (req, _reply) = server.next_request().await.unwrap();
    assert_eq!(req.uri().to_string(), watch_uri("11"));
    assert_eq!(k.query(&names).await.unwrap()[0].state, pending);
}

#[tokio::test]
async fn cancel_deletes_each_job_in_the_background_and_sweep_deletes_the_run() {
    let (k, mut server) = engine();
    let ids = vec![NAME.to_string(), "heddle-gone".to_string()];
    let (got, bodies) = tokio::join!(k.cancel(&ids), async {
        let uri = format!("{JOBS}/{NAME}?");
        let a = serve(&mut server, "DELETE", &uri, 200, bytes(job("5", running()))).await;
        let uri = format!("{JOBS}/heddle-gone?");
        let missing = bytes(status(
            404,
            "NotFound",
            "jobs.batch \"heddle-gone\" not found",
        ));
        let b = serve(&mut server, "DELETE", &uri, 404, missing).await;
        (a, b)
    });
    got.unwrap();
    let background = json!({ "propagationPolicy": "Background" });
    assert_eq!(bodies, (background.clone(), background.clone()));

    let (got, body) = tokio::join!(k.sweep(), async {
        let uri = format!("{JOBS}?&labelSelector=heddle.dev%2Frun%3Drun-1");
        let done =
            json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success" });
        serve(&mut server, "DELETE", &uri, 200, bytes(done)).await
    });
    got.unwrap();
    assert_eq!(body, background);
}

/// Jobs go out as JSON (`DynamicObject`), so nothing in the binary checks the manifest against
/// the batch/v1 schema: this test does, with k8s-openapi's typed Job, which must read every
/// field of the manifest and write the same document back.
#[tokio::test]
async fn the_manifest_is_a_batch_v1_job_that_the_typed_schema_reads_whole() {
    let (k, _server) = engine();
    let manifest = job_manifest(&k.pod_job(&submission()));
    let typed: TypedJob = serde_json::from_value(manifest.clone()).expect("a batch/v1 Job");
    assert_eq!(serde_json::to_value(&typed).unwrap(), manifest);
}
