"""heddle_stage — the helpers every python stage script shares (one file, not one copy per stage).

How a stage gets it: its definition says `[stage] include = ["../../lib/heddle_stage.py"]`; heddle copies this file
beside the stage's scripts (a content-addressed copy of the definition folder, which `{{ stage.dir }}` then names, on the
host and in a container alike), so a script does `import heddle_stage` from its own folder. Its bytes enter the key of
every stage that includes it, as the definition's own files do (`heddle status` says `definition changed:
heddle_stage.py`).

Standard library only: it runs in the DFC image, on a Windows device host and in the ORT env alike.
"""
import json
import os
import sys
import tempfile
import traceback


#: The longest message a status record keeps; the whole one is in the traceback in the log.
MESSAGE_CAP = 300


def short_message(exc):
    """The exception's message as a person reads it first: its first non-blank line, at most MESSAGE_CAP
    characters (onnxruntime puts a list of every missing input name in one message: 10 KB)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    msg = lines[0] if lines else ""
    if len(msg) > MESSAGE_CAP:
        msg = msg[:MESSAGE_CAP - 1].rstrip() + "…"
    elif len(lines) > 1:
        msg += " …"
    return msg


def stage_frame(exc, folder=None):
    """`file.py:LINE in FUNCTION` of the innermost traceback frame in the stage's own folder (the running
    script's), so the record says where in the stage it failed, not where in a library; None when no frame is."""
    folder = os.path.realpath(folder or os.path.dirname(os.path.abspath(sys.argv[0])))
    where = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if os.path.dirname(os.path.realpath(fs.filename)) == folder:
            where = f"{os.path.basename(fs.filename)}:{fs.lineno} in {fs.name}"
    return where


def record_error(exc):
    """Write {class, message, where} to $HEDDLE_ERROR_FILE, so the status record carries e.g.
    "AttributeError: 'function' object has no attribute 'set_wraparound_loss'" (the message's first line, cut)
    and the stage's own frame rather than an exit code; the whole traceback goes to stderr, heddle's log."""
    path = os.environ.get("HEDDLE_ERROR_FILE")
    if path:
        try:
            with open(path, "w") as f:
                json.dump({"class": type(exc).__name__, "message": short_message(exc),
                           "where": stage_frame(exc)}, f)
        except OSError:
            pass


def run(work):
    """`work()`'s result, or the stage fails the way every stage here fails: the exception is recorded (see
    record_error), its traceback printed to stderr (the log), and the process exits 1. SystemExit and
    KeyboardInterrupt pass through; any other BaseException (an SDK may raise one) is a failure like an
    Exception."""
    try:
        return work()
    except BaseException as e:
        if isinstance(e, (SystemExit, KeyboardInterrupt)):
            raise
        record_error(e)
        traceback.print_exc()
        sys.exit(1)


def write_json(path, obj):
    """`obj` as indented JSON at `path` (a stage's report or metadata output)."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def write_report(path, report, keys=None):
    """The stage's report at `path` (write_json), and one line of it on stderr for the log: the whole report, or
    only its `keys`."""
    write_json(path, report)
    print(json.dumps(report if keys is None else {k: report[k] for k in keys}), file=sys.stderr)


def load_json(path):
    """The JSON at `path`, or None when it is missing or not JSON (a gathered member's matrix.json or
    status.json)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gathered(folder):
    """The members of a gathered input as heddle lays it out, one sub-folder each: (name, path, matrix, status) in
    name order, matrix and status as load_json reads matrix.json and status.json. Nothing when `folder` is unbound
    ('') or absent."""
    if not folder or not os.path.isdir(folder):
        return
    for name in sorted(os.listdir(folder)):
        sub = os.path.join(folder, name)
        if os.path.isdir(sub):
            yield (name, sub, load_json(os.path.join(sub, "matrix.json")),
                   load_json(os.path.join(sub, "status.json")))


def ensure_writable_home():
    """Containers run as the invoking uid, whose HOME (often /root or /) may not be writable, and heddle drops a
    stage's HOME var inside containers; SDKs that write under ~ would fail. Point HOME at a private temp folder
    when it is not writable (call before the SDK is imported)."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if not (os.path.isdir(home) and os.access(home, os.W_OK)):
        os.environ["HOME"] = tempfile.mkdtemp(prefix="home-")


def sdk_identity(module="hailo_sdk_client"):
    """Which vendor module ran: version, and the TEST DOUBLE marker when it is tests/images/dfc-double's fake (the
    real SDK has no such attribute). Goes into reports, so an output made with a double says so."""
    import importlib
    sdk = importlib.import_module(module)
    ident = {"module": module, "version": getattr(sdk, "__version__", None),
             "test_double": getattr(sdk, "TEST_DOUBLE", None)}
    if ident["test_double"]:
        print(f"[heddle] {ident['test_double']}: {module} is the TEST DOUBLE (tests/images/dfc-double); "
              "outputs check the call sequence only", file=sys.stderr)
    return ident
