#!/bin/sh
# Makes a throwaway CA, a server certificate for 127.0.0.1 and a client certificate for
# Metacontroller in the directory $1 (default ./certs): ca.crt, hook.crt, hook.key,
# client.crt, client.key. For trying the example only; the keys never leave that directory.
# The client certificate is made the way upstream's webhook-auth test makes it: an EC P-256
# key signed with `openssl x509 -req` and no extensions, i.e. an X.509 v1 certificate.
set -eu
dir=${1:-certs}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=webhook-auth example CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout hook.key -out hook.csr 2>/dev/null
cat > hook.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
EXT
openssl x509 -req -in hook.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile hook.ext -out hook.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=metacontroller" \
  -keyout client.key -out client.csr 2>/dev/null
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -out client.crt 2>/dev/null
rm -f hook.csr hook.ext client.csr ca.srl
echo "wrote $dir/ca.crt $dir/hook.crt $dir/hook.key $dir/client.crt $dir/client.key"
