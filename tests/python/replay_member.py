"""A stage command for direct.gather: replays one gathered member's recorded outcome inside a heddle pipeline, so
heddle writes the gathered folder (matrix.json, status.json, the file) itself.
    replay_member.py cause LABEL FAILING_JSON OUT      fail if LABEL's k=v part is in FAILING_JSON, else write OUT
    replay_member.py member FILES LABEL OUT k=v ...    copy FILES/<k=v,...>.file to OUT, or fail as recorded
A failure is named through $HEDDLE_ERROR_FILE ("Class: message" split at the first ": ")."""
import json
import os
import shutil
import sys


def fail(error, code):
    cls, sep, msg = (error or "").partition(": ")
    if sep and " " not in cls:
        with open(os.environ["HEDDLE_ERROR_FILE"], "w") as f:
            json.dump({"class": cls, "message": msg}, f)
    print(error, file=sys.stderr)
    sys.exit(code or 1)


def main(argv):
    if argv[0] == "cause":
        label, failing, out = argv[1], json.loads(argv[2]), argv[3]
        tag = label.partition("[")[2].rstrip("]")
        if tag in failing:
            fail(failing[tag], 1)
        open(out, "w").close()
        return
    files, label, out, kvs = argv[1], argv[2], argv[3], argv[4:]
    tag = ",".join(kvs)
    st = json.load(open(os.path.join(files, "statuses.json")))[tag]
    if st["status"] == "ok":
        shutil.copy(os.path.join(files, tag.replace("/", "_") + ".file"), out)
        return
    if st["status"] != "failed":
        sys.exit(f"{label}: member {tag} is {st['status']}: only ok and failed members run")
    fail(st.get("error"), st.get("exit_code"))


if __name__ == "__main__":
    main(sys.argv[1:])
