// One ConfigMap per Greeting holding its greeting; the Greeting reports Ready once the
// ConfigMap exists (the rollout's health gate waits for it).
function(request)
  local parent = request.parent;
  local who = std.get(std.get(parent, 'spec', {}), 'who', 'World');
  local ready = std.length(request.children['ConfigMap.v1']) > 0;
  {
    children: [{
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: parent.metadata.name },
      data: { greeting: 'Hello, ' + who + '!' },
    }],
    status: { conditions: [{ type: 'Ready', status: if ready then 'True' else 'False' }] },
  }
