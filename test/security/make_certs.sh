#!/usr/bin/env bash
# make_certs.sh OUT_DIR: a throw-away PKI and token file for the security tests.
#
# Generated at test time (never committed), so no key material lives in the repository and
# nothing expires in the tree. Everything is overwritten on each run. EC P-256 keys keep it
# fast (well under a second). Only openssl is needed; the "expired" certificate is made with
# `openssl ca -startdate/-enddate` because `x509 -req -not_before` needs OpenSSL 3.4+ and
# Debian 12 ships 3.0.
#
# Output (PEM, fixed names):
#   ca.crt ca.key                CN=clusterd-test-ca
#   other-ca.crt other-ca.key    CN=clusterd-other-ca (signs nothing the server trusts)
#   server.crt server.key        CN=clusterd, SANs localhost 127.0.0.1 ::1 clusterd
#   server2.crt server2.key      the same names, another key (rotation)
#   NAME.crt NAME.key            client certificates (see CLIENTS below), wrongca signed by other-ca,
#                                expired valid 2020-01-01..2020-01-02
#   tokens.csv                   kube-apiserver --token-auth-file format
#   token-NAME                   each token alone (no newline)
# Prints nothing on success.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

days=1

newkey() {  # newkey FILE
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
  chmod 600 "$1"
}

# make_ca NAME CN
make_ca() {
  newkey "$out/$1.key"
  openssl req -new -x509 -key "$out/$1.key" -out "$out/$1.crt" -days "$days" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" 2>/dev/null
}

# sign CA NAME SUBJECT EXTFILE: NAME.key + NAME.crt signed by CA (valid $days days).
sign() {
  newkey "$out/$2.key"
  openssl req -new -key "$out/$2.key" -subj "$3" -out "$tmp/$2.csr" 2>/dev/null
  openssl x509 -req -in "$tmp/$2.csr" -CA "$out/$1.crt" -CAkey "$out/$1.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days "$days" -extfile "$4" -out "$out/$2.crt" 2>/dev/null
}

# clientAuth too: under mutual TLS, ClusterD's /readyz self-check presents
# the server's own certificate (as Helm's genSignedCert and cert-manager's
# default usages allow).
cat >"$tmp/server.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1,DNS:clusterd
authorityKeyIdentifier=keyid
EOF
cat >"$tmp/client.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
authorityKeyIdentifier=keyid
EOF

make_ca ca clusterd-test-ca
make_ca other-ca clusterd-other-ca

sign ca server "/CN=clusterd" "$tmp/server.ext"
sign ca server2 "/CN=clusterd" "$tmp/server.ext"

# name|subject (openssl -subj syntax; a repeated O= gives two O entries)
CLIENTS=(
  "worker01|/CN=system:node:worker01"
  "worker02|/CN=system:node:worker02"
  "viewer|/CN=alice/O=clusterd:viewer"
  "operator|/CN=bob/O=clusterd:operator"
  "admin|/CN=root-op/O=clusterd:admin"
  "reporter|/CN=netprobe/O=clusterd:reporter"
  "reporter2|/CN=diskwatch/O=clusterd:reporter"
  "jobagent|/CN=job:train-1"
  "jobagent2|/CN=job:train-2"
  "norole|/CN=nobody"
  "multi|/CN=carol/O=clusterd:viewer/O=clusterd:reporter"
)
for entry in "${CLIENTS[@]}"; do
  sign ca "${entry%%|*}" "${entry#*|}" "$tmp/client.ext"
done
sign other-ca wrongca "/CN=alice/O=clusterd:viewer" "$tmp/client.ext"

# expired: `openssl ca` accepts explicit start and end dates; it needs a database and a config.
mkdir -p "$tmp/ca-db"
: >"$tmp/ca-db/index.txt"
openssl rand -hex 8 >"$tmp/ca-db/serial"
cat >"$tmp/ca.cnf" <<EOF
[ ca ]
default_ca = test_ca
[ test_ca ]
database = $tmp/ca-db/index.txt
serial = $tmp/ca-db/serial
new_certs_dir = $tmp/ca-db
certificate = $out/ca.crt
private_key = $out/ca.key
default_md = sha256
policy = policy_any
unique_subject = no
copy_extensions = none
[ policy_any ]
commonName = supplied
organizationName = optional
[ client_ext ]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF
newkey "$out/expired.key"
openssl req -new -key "$out/expired.key" -subj "/CN=alice/O=clusterd:viewer" -out "$tmp/expired.csr" 2>/dev/null
openssl ca -batch -config "$tmp/ca.cnf" -extensions client_ext -notext -preserveDN \
  -startdate 20200101000000Z -enddate 20200102000000Z \
  -in "$tmp/expired.csr" -out "$out/expired.crt" 2>"$tmp/ca.err" ||
  { cat "$tmp/ca.err" >&2; exit 1; }

# Tokens: token,user,uid,"groups"
declare -A token_user=(
  [viewer]=alice [operator]=bob [admin]=root-op [reporter]=netprobe
  [jobagent]=job:train-1 [worker01]=system:node:worker01
)
declare -A token_group=(
  [viewer]=clusterd:viewer [operator]=clusterd:operator [admin]=clusterd:admin [reporter]=clusterd:reporter
  [jobagent]="" [worker01]=""
)
: >"$tmp/tokens.csv"
uid=1000
for name in viewer operator admin reporter jobagent worker01; do
  token=$(openssl rand -hex 16)
  printf '%s' "$token" >"$out/token-$name"
  chmod 600 "$out/token-$name"
  line="$token,${token_user[$name]},$uid"
  [[ -n ${token_group[$name]} ]] && line+=",\"${token_group[$name]}\""
  echo "$line" >>"$tmp/tokens.csv"
  uid=$((uid + 1))
done
mv "$tmp/tokens.csv" "$out/tokens.csv"
chmod 600 "$out/tokens.csv"

# Check: everything but wrongca and expired verifies against ca; those two must not.
for name in server server2 "${CLIENTS[@]%%|*}"; do
  openssl verify -CAfile "$out/ca.crt" "$out/$name.crt" >/dev/null ||
    { echo "make_certs: $name.crt does not verify against ca.crt" >&2; exit 1; }
done
openssl verify -CAfile "$out/other-ca.crt" "$out/wrongca.crt" >/dev/null ||
  { echo "make_certs: wrongca.crt does not verify against other-ca.crt" >&2; exit 1; }
if openssl verify -CAfile "$out/ca.crt" "$out/wrongca.crt" >/dev/null 2>&1; then
  echo "make_certs: wrongca.crt verifies against ca.crt" >&2; exit 1
fi
openssl verify -CAfile "$out/ca.crt" -no_check_time "$out/expired.crt" >/dev/null ||
  { echo "make_certs: expired.crt is not signed by ca.crt" >&2; exit 1; }
if openssl verify -CAfile "$out/ca.crt" "$out/expired.crt" >/dev/null 2>&1; then
  echo "make_certs: expired.crt is not expired" >&2; exit 1
fi
