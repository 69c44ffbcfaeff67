#!/bin/sh
# Makes a throwaway CA and a server certificate for 127.0.0.1 in the directory $1
# (default ./certs): ca.crt, hook.crt, hook.key. For trying the example only; the keys
# never leave that directory.
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
rm -f hook.csr hook.ext ca.srl
echo "wrote $dir/ca.crt $dir/hook.crt $dir/hook.key"
