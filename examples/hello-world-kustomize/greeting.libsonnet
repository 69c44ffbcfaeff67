// Imported by sync.jsonnet: every key of the hook's ConfigMap is importable by name.
{
  configMap(name, who):: {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: name },
    data: { greeting: 'Hello, %s!' % who },
  },
}
