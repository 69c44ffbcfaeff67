// Sync hook of the hello-world-kustomize example: a ConfigMap per HelloJsonnet holding its
// greeting, and a status counting the ConfigMaps it owns. Run by the controller itself.
local greeting = import 'greeting.libsonnet';

function(request) {
  local parent = request.parent,
  local who = std.get(std.get(parent, 'spec', {}), 'who', 'World'),
  status: {
    greetings: std.length(std.objectFields(request.children['ConfigMap.v1'])),
  },
  children: [greeting.configMap(parent.metadata.name, who)],
}
