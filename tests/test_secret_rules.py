"""The default secret rules on a corpus of every kind of credential they
claim to catch, as files and as members of zip and tar archives, through
the real indexer, ``open_file`` and ``find``: every one is kept out (100%),
while look-alikes that hold no credential stay indexed and readable.

Credentials are built at run time from a seeded generator, so no
token-shaped literal sits in this file for a scanner to flag.
"""

from __future__ import annotations

import base64
import io
import random
import re
import string
import tarfile
import zipfile
from pathlib import Path

import pytest

from corpus import files
from corpus.ingest.prepare import HEAD_BYTES
from corpus.models import Chunk, Document, Representation
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors, secret_scan
from kernel.config import DEFAULT_PATH_EXCLUDES, DEFAULT_SECRET_PATTERNS, build_config
from kernel.secret_scan import SecretScanner
from tests.support import assert_linear, texts_hold

pytestmark = pytest.mark.django_db

_rng = random.Random(20261125)
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"


def rand(length: int, alphabet: str = ALNUM) -> str:
    """Random characters; with the default alphabet, holding a lower-case
    letter, an upper-case letter and a digit, as generated keys do."""
    while True:
        value = "".join(_rng.choice(alphabet) for _ in range(length))
        classes = [c for c in ("[a-z]", "[A-Z]", "[0-9]") if re.search(c, alphabet)]
        if all(re.search(c, value) for c in classes):
            return value


def pem(kind: str, label: str = "PRIVATE KEY") -> str:
    body = "\n".join(rand(64, ALNUM + "+/") for _ in range(4))
    head = f"{kind} {label}".strip()
    return f"-----BEGIN {head}-----\n{body}\n-----END {head}-----\n"


def jwt() -> str:
    return f"eyJ{rand(33, URLSAFE)}.eyJ{rand(60, URLSAFE)}.{rand(43, URLSAFE)}"


# name -> (file name, text, the part that must never come back)
CONTENT_SECRETS: dict[str, tuple[str, str, str]] = {}


def _add(name: str, filename: str, secret: str, template: str = "{}\n") -> None:
    CONTENT_SECRETS[name] = (filename, template.format(secret), secret)


for prefix in ("ghp", "gho", "ghu", "ghs", "ghr"):
    _add(f"github-{prefix}", "ci/deploy.sh", f"{prefix}_{rand(36)}", 'export GH_AUTH="{}"\n')
_add("github-fine-grained", "notes/setup.md", f"github_pat_{rand(22)}_{rand(59)}", "Use `{}` to push.\n")
_add("gitlab", "config/ci.yml", f"glpat-{rand(20, URLSAFE)}", "variables:\n  GL: {}\n")
for kind in "abposr":
    slack = f"xox{kind}-{rand(12, string.digits)}-{rand(24)}"
    _add(f"slack-xox{kind}", "bot/settings.py", slack, 'SLACK = "{}"\n')
_add(
    "slack-webhook",
    "bot/hooks.txt",
    f"https://hooks.slack.com/services/T{rand(8).upper()}/B{rand(8).upper()}/{rand(24)}",
)
_add("stripe-secret", "billing/keys.js", f"sk_live_{rand(24)}", "const stripe = Stripe('{}');\n")
_add("stripe-restricted", "billing/restricted.txt", f"rk_live_{rand(24)}")
_add("google", "web/maps.js", f"AIza{rand(35, URLSAFE)}", 'const MAPS_KEY = "{}";\n')
_add("openai-legacy", "ml/openai.py", f"sk-{rand(48)}", 'client = OpenAI(api_key="{}")\n')
_add("openai-project", "ml/project.toml", f"sk-proj-{rand(64, URLSAFE)}", 'key = "{}"\n')
_add("anthropic", "ml/claude.ts", f"sk-ant-api03-{rand(93, URLSAFE)}AA", "const k = `{}`;\n")
for kind in ("RSA", "EC", "DSA", "OPENSSH", "ENCRYPTED", ""):
    secret = pem(kind)
    _add(f"private-key-{kind.lower() or 'pkcs8'}", f"keys/{kind.lower() or 'pkcs8'}.txt", secret, "{}")
_add(
    "private-key-in-json",
    "cloud/service-account.json",
    pem("").replace("\n", "\\n"),
    '{{"type": "service_account", "private_key": "{}"}}\n',
)
_add("pgp-private-key", "keys/pgp.asc", pem("PGP", "PRIVATE KEY BLOCK"), "{}")
_add("ssh2-private-key", "keys/ssh2.txt", pem("SSH2 ENCRYPTED").replace("-----", "---- "), "{}")
_add("putty", "keys/server.txt", f"PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\n{rand(44)}", "{}\n")
_add("jwt", "api/fixtures.json", jwt(), '{{"session": "{}"}}\n')
_add("npm", "tools/publish.sh", f"npm_{rand(36)}", "NPM_TOKEN={} npm publish\n")
_add("hugging-face", "ml/hub.py", f"hf_{rand(34)}", 'login("{}")\n')
_add("aws-access-key", "infra/aws.txt", f"AKIA{rand(16, string.ascii_uppercase + string.digits)}")
_add("password-assignment", "app/db.py", rand(20, ALNUM + "!#%"), 'DB_PASSWORD = "{}"\n')
_add("api-key-yaml", "app/service.yaml", rand(32), "service:\n  api_key: {}\n")
_add("client-secret-json", "app/oauth.json", rand(40, URLSAFE), '{{"client_secret": "{}"}}\n')
_add("secret-env-style", "app/settings.txt", rand(24), "STRIPE_SECRET={}\n")
_add("example-file-with-a-real-key", "service/.env.example", f"ghp_{rand(36)}", "GITHUB_TOKEN={}\n")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# Issue #34, "Seen 3": shapes the rules above did not catch.
_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
    "    client-certificate-data: {cert}\n    client-key-data: {{}}\n"
)
_add(
    "kubeconfig-rsa",
    "k8s/admin.conf",
    b64(pem("RSA")),
    _KUBECONFIG.format(cert=b64("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")),
)
_add("kubeconfig-pkcs8", "k8s/cluster.yaml", b64(pem("")), _KUBECONFIG.format(cert="LS0t"))
_add("kubeconfig-ec", "k8s/dev.yml", b64(pem("EC")), _KUBECONFIG.format(cert="LS0t"))
_add("k8s-secret-tls-key", "k8s/tls.yaml", b64(pem("")), "kind: Secret\ndata:\n  tls.key: {}\n")
_add("postgres-url", "app/settings.py", rand(14), 'DATABASE_URL = "postgres://app:{}@db.internal:5432/app"\n')
_add("postgresql-url", "app/alembic.ini", rand(14), "sqlalchemy.url = postgresql+psycopg://app:{}@db/app\n")
_add("mysql-url", "app/shop.yaml", rand(14), "dsn: mysql://root:{}@127.0.0.1:3306/shop\n")
_add("redis-url", "app/cache.txt", rand(14), "REDIS_URL=redis://:{}@cache:6379/0\n")
_add("amqp-url", "app/celery.py", rand(14), 'broker_url = "amqp://worker:{}@rabbit:5672//"\n')
_add(
    "azure-storage",
    "cloud/azure.txt",
    rand(86, ALNUM + "+/") + "==",
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={};EndpointSuffix=core.windows.net\n",
)
_add(
    "sendgrid",
    "mail/send.py",
    f"SG.{rand(22, URLSAFE)}.{rand(43, URLSAFE)}",
    'sg = SendGridAPIClient("{}")\n',
)
_add("basic-auth-header", "http/requests.http", b64(f"svc:{rand(16)}"), "GET /api\nAuthorization: Basic {}\n")
_add(
    "basic-auth-nginx",
    "proxy/upstream.conf",
    b64(f"svc:{rand(16)}"),
    'proxy_set_header Authorization "Basic {}";\n',
)
_add("db-pass", "deploy/app.sh", rand(12), "export DB_PASS={}\n")
_add("redis-auth", "deploy/redis.cfg", rand(12), "REDIS_AUTH={}\n")
_add("mysql-pwd", "deploy/mysql.txt", rand(10), "MYSQL_PWD='{}'\n")
_add("admin-passwd", "deploy/admin.ini", rand(12), "ADMIN_PASSWD = {}\n")
_add(
    "compose-password-15",
    "compose/docker-compose.yml",
    rand(15),
    "services:\n  db:\n    image: postgres\n    environment:\n      POSTGRES_PASSWORD: {}\n",
)

# Files whose name alone keeps them out, whatever they hold.
EXCLUDED_NAMES = [
    ".env",
    ".env.local",
    ".env.production",
    "app/.env.development.local",
    ".envrc",
    "home/.ssh/id_rsa",
    "home/.ssh/id_dsa",
    "home/.ssh/id_ecdsa",
    "home/.ssh/id_ed25519",
    "home/.ssh/id_ed25519_sk",
    "certs/client.p12",
    "certs/client.pfx",
    "certs/server.pem",
    "certs/server.key",
    "android/release.jks",
    "keys/putty.ppk",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    "web/.htpasswd",
    "home/.aws/credentials",
    "home/.docker/config.json",
    "home/.kube/config",
    "infra/terraform.tfstate",
    # issue #34: env files named the other way round, kubeconfig files
    "deploy/production.env",
    "deploy/env.production",
    "config/app.env",
    "k8s/kubeconfig",
    "k8s/prod.kubeconfig",
]
NAME_SECRET = "opaque-value-without-any-shape"  # no content rule would catch it

# Look-alikes that hold no credential: indexed and readable.
HARMLESS = {
    ".env.example": "GITHUB_TOKEN=\nDB_PASSWORD=changeme\nAPI_KEY=<your key here>\n",
    ".env.sample": "STRIPE_KEY=sk_live_xxx\n",
    "home/.ssh/id_ed25519.pub": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx user@host\n",
    "app/login.py": (
        'password = "changeme"\n'
        'api_key = os.environ["API_KEY"]\n'
        "secret = get_secret(name)\n"
        'PASSWORD_FIELD = "password_confirmation_field"\n'
        "private_key = load_private_key(path)\n"
    ),
    "docs/keys.md": "Keys start with `ghp_`, `sk-` or `AIza`; a PEM key begins with -----BEGIN.\n",
    "src/identity.py": "def id_rsa_fingerprint(key):\n    return key.digest()\n",
    "docs/databases.md": (
        "Connect with postgres://user:password@localhost/db, redis://:${REDIS_PASSWORD}@cache\n"
        "or the classic demo mysql://scott:tiger@db/test; f'amqp://{user}:{password}@{host}//'.\n"
        "Send `Authorization: Basic <credentials>`.\n"
    ),
    "compose/example/docker-compose.yml": "services:\n  db:\n    environment:\n"
    "      POSTGRES_PASSWORD: example\n",
    "deploy/example.env": "DB_PASS=\nREDIS_AUTH=changeme\n",
    "migrations/env.py": "from alembic import context\n\nconfig = context.config\n",
    "k8s/public.yaml": "client-certificate-data: " + b64("-----BEGIN CERTIFICATE-----\nMIIB\n") + "\n",
}

# Issue #34, "Seen 4": names that are credentials, whatever the file holds.
TOKEN_NAMES = [
    f"notes/ghp_{rand(36)}.md",
    f"drafts/sk-proj-{rand(40, URLSAFE)}/readme.md",
    f"AKIA{rand(16, string.ascii_uppercase + string.digits)}.txt",
]
TOKEN_NAME_TEXT = "an ordinary note in a file with an unusual name\n"


ARCHIVES = ("bundles/all.zip", "bundles/all.tar.gz", "bundles/nested.zip!/inner.zip")


def _archive_members() -> dict[str, str]:
    members = {f"secrets/{name}.txt": text for name, (_, text, _) in CONTENT_SECRETS.items()}
    members["conf/.env.local"] = f"VALUE={NAME_SECRET}\n"
    members["conf/production.env"] = f"VALUE={NAME_SECRET}\n"
    members.update({f"names/{name}": TOKEN_NAME_TEXT for name in TOKEN_NAMES})
    members["readme.md"] = "# Archive\n\nNothing secret here.\n"
    return members


def _zip(members: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _tar_gz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def positive_corpus() -> dict[str, str | bytes]:
    """Every secret shape, excluded name and token-like name, the harmless
    look-alikes, and all of them again inside a zip, a tar.gz and a zip in a zip."""
    files: dict[str, str | bytes] = {}
    for name, (filename, text, _) in CONTENT_SECRETS.items():
        folder, _, base = filename.rpartition("/")
        # each kind in its own folder, so two kinds never share a file
        files[f"{name}/{base}" if folder else filename] = text
    for rel in EXCLUDED_NAMES:
        files[rel] = f"VALUE={NAME_SECRET}\n"
    files.update(HARMLESS)
    files.update(dict.fromkeys(TOKEN_NAMES, TOKEN_NAME_TEXT))
    members = _archive_members()
    files["bundles/all.zip"] = _zip(members)
    files["bundles/all.tar.gz"] = _tar_gz(members)
    files["bundles/nested.zip"] = _zip({"inner.zip": _zip(members)})
    return files


@pytest.fixture
def indexed(corpus_dir: Path, state, index, monkeypatch):
    """The whole positive corpus and the look-alikes, indexed once."""
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    index(positive_corpus())
    return ExclusionEngine.from_config(corpus_dir, build_config({}, {}, {}), state_dir=state.path)


def content_paths() -> list[tuple[str, str]]:
    """(rel_path, secret) of every positive file and archive member."""
    paths = []
    for name, (filename, _, secret) in CONTENT_SECRETS.items():
        folder, _, base = filename.rpartition("/")
        paths.append((f"{name}/{base}" if folder else filename, secret))
        for archive in ARCHIVES:
            paths.append((f"{archive}!/secrets/{name}.txt", secret))
    return paths


def _refused(engine: ExclusionEngine, rel: str) -> bool:
    try:
        files.open_file(engine, rel_path=rel)
    except errors.Dir2mcpError as exc:
        return exc.code == errors.FORBIDDEN
    return False


def test_every_kind_is_kept_out_in_files_and_archives(indexed):
    engine = indexed
    positives = content_paths()
    kept_out = []
    for rel, secret in positives:
        doc = Document.objects.filter(rel_path=rel).first()
        skipped = doc is not None and doc.status == "skipped" and doc.error.startswith("SECRET_DETECTED")
        stored = texts_hold(Representation, secret[:40])
        chunked = texts_hold(Chunk, secret[:40])
        if skipped and not stored and not chunked and _refused(engine, rel):
            kept_out.append(rel)
    missed = sorted({rel for rel, _ in positives} - set(kept_out))
    assert missed == [], f"{len(kept_out)}/{len(positives)} kept out; served: {missed}"
    assert len(positives) == (1 + len(ARCHIVES)) * len(CONTENT_SECRETS)


def test_find_never_returns_a_secret(indexed):
    for _, _, secret in CONTENT_SECRETS.values():
        fragment = secret.strip().splitlines()[0][:30]
        result = files.find(indexed, content=fragment, case_sensitive=True)
        texts = repr(result["matches"])
        assert secret[:30] not in texts


def test_files_kept_out_by_name_are_neither_indexed_nor_opened(indexed):
    engine = indexed
    members = [f"{archive}!/conf/{name}" for archive in ARCHIVES for name in (".env.local", "production.env")]
    served = []
    for rel in [*EXCLUDED_NAMES, *members]:
        if Document.objects.filter(rel_path=rel).exists() or not _refused(engine, rel):
            served.append(rel)
    assert served == []
    assert not texts_hold(Representation, NAME_SECRET)


def test_files_named_like_credentials_are_neither_indexed_nor_opened(indexed):
    """A name is screened by the content rules: the file, a file below a
    directory so named, and archive members so named are refused, and no
    row of the index holds the name."""
    engine = indexed
    members = [f"{archive}!/names/{name}" for archive in ARCHIVES for name in TOKEN_NAMES]
    served = [
        rel
        for rel in [*TOKEN_NAMES, *members]
        if Document.objects.filter(rel_path=rel).exists() or not _refused(engine, rel)
    ]
    assert served == []
    for name in TOKEN_NAMES:
        token = name.split("/")[-1 if name.count("/") < 2 else 1].rsplit(".", 1)[0]
        assert not Document.objects.filter(rel_path__contains=token[:20]).exists(), name
        reason = engine.excluded_reason(name)
        assert reason.startswith("SECRET_DETECTED: name matches secret_patterns["), reason
        assert token not in reason


def test_look_alikes_stay_indexed_and_readable(indexed):
    engine = indexed
    for rel, text in [*HARMLESS.items(), ("bundles/all.zip!/readme.md", "# Archive\n")]:
        doc = Document.objects.get(rel_path=rel)
        assert doc.status == "ok", (rel, doc.error)
        assert files.open_file(engine, rel_path=rel)["content"].startswith(text.splitlines()[0]), rel


def test_each_rule_is_what_catches_its_kind():
    """Each new kind is caught by the rule written for it (not by chance by
    another), and each rule index stays where docs/security.md says."""
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), tuple(DEFAULT_SECRET_PATTERNS)))
    expected = {
        "aws-access-key": 0,
        "private-key-rsa": 5,
        "private-key-openssh": 5,
        "private-key-in-json": 5,
        "pgp-private-key": 5,
        "ssh2-private-key": 5,
        "putty": 6,
        "github-ghp": 7,
        "github-fine-grained": 8,
        "gitlab": 9,
        "slack-xoxb": 10,
        "slack-webhook": 11,
        "stripe-secret": 12,
        "google": 13,
        "openai-legacy": 14,
        "openai-project": 14,
        "anthropic": 14,
        "jwt": 15,
        "npm": 16,
        "hugging-face": 16,
        "password-assignment": 17,
        "api-key-yaml": 17,
        "client-secret-json": 17,
        "secret-env-style": 17,
        "kubeconfig-rsa": 18,
        "kubeconfig-pkcs8": 18,
        "kubeconfig-ec": 18,
        "k8s-secret-tls-key": 18,
        "postgres-url": 19,
        "postgresql-url": 19,
        "mysql-url": 19,
        "redis-url": 19,
        "amqp-url": 19,
        "azure-storage": 20,
        "sendgrid": 20,
        "basic-auth-header": 21,
        "basic-auth-nginx": 21,
        "db-pass": 22,
        "redis-auth": 22,
        "mysql-pwd": 22,
        "admin-passwd": 22,
        "compose-password-15": 22,
    }
    for name, index in expected.items():
        _, text, _ = CONTENT_SECRETS[name]
        single = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), (DEFAULT_SECRET_PATTERNS[index],)))
        assert single.find_secret(text) == "secret_patterns[0]", name
        assert engine.find_secret(text) is not None, name


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("token ghp_" + "a" * 35, id="github-too-short"),
        pytest.param("xghp_" + rand(36), id="github-inside-a-word"),
        pytest.param("task-" + rand(48), id="sk-inside-a-word"),
        pytest.param('password = "correct horse battery staple"', id="passphrase-with-spaces"),
        pytest.param('password = "alllowercaseletters123"', id="no-upper-case"),
        pytest.param('api_key = "${API_KEY}"', id="reference"),
        pytest.param("secret: os.environ['SECRET_VALUE_1']", id="code"),
        pytest.param("-----BEGIN PUBLIC KEY-----", id="public-key"),
        pytest.param("-----BEGIN CERTIFICATE-----", id="certificate"),
        pytest.param("eyJhbGciOiJIUzI1NiJ9", id="jwt-header-alone"),
        pytest.param(
            '_SK_START = b"-----BEGIN OPENSSH PRIVATE KEY-----"\n_SK_END = b"-----END', id="pem-marker"
        ),
        pytest.param("def sign(private_key: PKCS7PrivateKeyTypes, data: bytes):", id="annotation"),
        pytest.param("String token = getCompleteTokenInBuffer(null);", id="token-from-a-call"),
        pytest.param(
            "if cache_token != current_token:\n        dispatch_cache.clear()", id="token-then-next-line"
        ),
    ],
)
def test_near_misses_are_not_secrets(text):
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), tuple(DEFAULT_SECRET_PATTERNS)))
    assert engine.find_secret(f"line one\n{text}\nline three") is None


def test_example_templates_are_readable_but_other_env_files_are_not():
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ()))
    for name in (".env.example", ".env.sample", ".env.template", "app/.env.example"):
        assert engine.excluded_reason(name) is None, name
    for name in (".env.local", ".env.production", ".env.test", "deep/.env.staging.local"):
        assert engine.excluded_reason(name) == "path_excludes: **/.env.*", name


CRAFTED = {
    "jwt starts": "eyJ",
    "jwt almost": "eyJabcdefghij.eyJabcdefghij.",
    "github starts": "ghp_",
    "openai starts": "sk-",
    "key headers": "-----BEGIN ",
    "assignments": "password = ",
    "assignment values": "api_key=aB3",
    "one long run": "a",
    "url credentials": "postgres://u:",
    "base64 pem starts": "LS0tLS1CRUdJTi",
    "basic auth": "Authorization: Basic ",
    "short passwords": "DB_PASS=",
}


@pytest.mark.parametrize("piece", list(CRAFTED.values()), ids=list(CRAFTED))
def test_no_text_makes_the_rules_slow(piece):
    """Each rule's start repeated over 1 MiB, without the rest it needs,
    costs at most 10x the CPU of a quarter of it: a backtracking blow-up
    would be 16x or more, and take minutes; linear rules take well under a
    second (bench/secrets.py: the slowest is about 0.3 s)."""
    engine = ExclusionEngine(Path("/nonexistent"), ExclusionPolicy((), tuple(DEFAULT_SECRET_PATTERNS)))
    text = (piece * (2**20 // len(piece) + 1))[: 2**20]
    quarter = text[: 2**18]
    assert_linear(lambda: engine.find_secret(quarter), lambda: engine.find_secret(text))


def test_a_text_file_too_large_to_index_is_screened_in_full(corpus_dir, state, index):
    """open_file serves slices of a text file too large to index, so it is
    screened whole, block by block (issue #34): one holding a credential, even
    across the boundary of two blocks, is secret-bearing, listed nowhere and
    refused; one without stays listed as too large."""
    config = build_config({"ingest": {"max_file_mb": 1}}, {}, {})
    secret = f"ghp_{rand(36)}"
    boundary = HEAD_BYTES + secret_scan.BLOCK_BYTES  # where the second block starts
    filler = ("a line of an ordinary large log file\n" * (boundary // 37 + 1))[: boundary - 20]
    across = filler + f"token {secret}\n" + "tail\n" * 1000
    assert across.index(secret) < boundary < across.index(secret) + len(secret)
    index({"logs/across.log": across, "logs/clean.log": filler + "tail\n"}, config=config)

    statuses = dict(Document.objects.filter(rel_path__startswith="logs/").values_list("rel_path", "error"))
    assert statuses["logs/across.log"].startswith("SECRET_DETECTED: content matches secret_patterns[7]")
    assert statuses["logs/clean.log"].startswith("FILE_TOO_LARGE")
    listed = {f["rel_path"] for f in files.list_files()["files"]}
    assert "logs/clean.log" in listed and "logs/across.log" not in listed
    engine = ExclusionEngine.from_config(corpus_dir, config, state_dir=state.path)
    assert _refused(engine, "logs/across.log")
    assert files.open_file(engine, rel_path="logs/clean.log", start_line=1, end_line=1)["content"]


def test_every_default_rule_runs_in_the_linear_set():
    """No default rule falls back to Python's re (which backtracks): each
    compiles for RE2, and all of them for Python's re too (config checks)."""
    assert SecretScanner(DEFAULT_SECRET_PATTERNS).linear
    for pattern in DEFAULT_SECRET_PATTERNS:
        assert secret_scan.compiles_in_re2(pattern), pattern
        re.compile(pattern)


def test_a_rule_only_python_compiles_still_runs_after_the_set():
    """A user's look-around rule is accepted and judged in list order."""
    lookbehind = r"(?<!not )internal-\d{6}"
    engine = ExclusionEngine(
        Path("/nonexistent"), ExclusionPolicy((), (lookbehind, DEFAULT_SECRET_PATTERNS[0]))
    )
    assert not SecretScanner([lookbehind]).linear
    assert engine.find_secret("id internal-123456") == "secret_patterns[0]"
    assert engine.find_secret("not internal-123456") is None
    assert (
        engine.find_secret(f"not internal-123456 AKIA{rand(16, string.ascii_uppercase)}")
        == "secret_patterns[1]"
    )
    config = build_config({"security": {"secret_patterns": [lookbehind]}}, {}, {})
    assert config.security.secret_patterns == [lookbehind]
