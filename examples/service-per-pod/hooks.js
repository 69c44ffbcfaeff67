#!/usr/bin/env node
// Hooks of the service-per-pod example (Node.js, no npm packages).
//
// POST /sync: one Service per pod of the StatefulSet (`<name>-0` … `<name>-<replicas-1>`),
//   each selecting its pod by the statefulset.kubernetes.io/pod-name label the StatefulSet
//   controller puts on it; the StatefulSet is labeled service-per-pod.example.com/decorated.
// POST /finalize: no Services and the label removed; finalized once no Service is left.
//
// Run: node hooks.js [--port 8080]
'use strict';

const http = require('http');

const PORT_ANNOTATION = 'service-per-pod.example.com/port';
const TARGET_PORT_ANNOTATION = 'service-per-pod.example.com/target-port';
const DECORATED_LABEL = 'service-per-pod.example.com/decorated';

function validPort(n) {
  return Number.isInteger(n) && n > 0 && n < 65536;
}

function services(sts) {
  const annotations = sts.metadata.annotations || {};
  const port = parseInt(annotations[PORT_ANNOTATION], 10);
  const target = parseInt(annotations[TARGET_PORT_ANNOTATION] || port, 10);
  if (!validPort(port) || !validPort(target)) {
    // A failed hook call becomes a SyncError Event on the StatefulSet; Services are kept.
    throw new Error(`annotations ${PORT_ANNOTATION}/${TARGET_PORT_ANNOTATION} must be ports`);
  }
  const replicas = sts.spec.replicas === undefined ? 1 : sts.spec.replicas;
  const out = [];
  for (let i = 0; i < replicas; i++) {
    const pod = `${sts.metadata.name}-${i}`;
    out.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name: pod,
        labels: { 'app.kubernetes.io/managed-by': 'service-per-pod' },
      },
      spec: {
        selector: { 'statefulset.kubernetes.io/pod-name': pod },
        ports: [{ name: 'http', port, targetPort: target }],
      },
    });
  }
  return out;
}

function sync(request) {
  return { labels: { [DECORATED_LABEL]: 'true' }, attachments: services(request.object) };
}

function finalize(request) {
  const left = Object.keys((request.attachments || {})['Service.v1'] || {}).length;
  return { labels: { [DECORATED_LABEL]: null }, attachments: [], finalized: left === 0 };
}

const routes = { '/sync': sync, '/finalize': finalize };

function serve(port, host) {
  const server = http.createServer((req, res) => {
    const route = routes[req.url];
    if (req.method !== 'POST' || !route) {
      res.writeHead(404).end();
      return;
    }
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let body;
      try {
        body = JSON.stringify(route(JSON.parse(Buffer.concat(chunks).toString())));
      } catch (err) {
        res.writeHead(400, { 'Content-Type': 'text/plain' }).end(String(err.message || err));
        return;
      }
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(body);
    });
  });
  server.listen(port, host);
}

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

serve(parseInt(arg('--port', '8080'), 10), arg('--host', '127.0.0.1'));
