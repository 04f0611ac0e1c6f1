"""Write a scale-test pipeline: gen.py SHAPE N PARAM_BYTES DIR (see run.sh for the shapes)."""
import os
import sys

shape, n, param_bytes, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
vals = ",".join(str(i) for i in range(n))
gather = ('[stages.g]\ninputs = {{ all = "{up}[*].o" }}\n'
          'run = "find {{{{ in.all.dir }}}} -name o.txt | wc -l > {{{{ out.o }}}}"\n'
          'outputs = {{ o = "o.txt" }}\n')
L = ['[pipeline]\nname = "scale"\n']
if shape == "explain":
    # A `uses` stage whose param enters the key but not the command line.
    sd = os.path.join(out, "stages", "big")
    os.makedirs(sd, exist_ok=True)
    with open(os.path.join(sd, "stage.toml"), "w") as f:
        f.write('[stage]\nrun = ["sh", "-c", "echo $0 > $1", "{{ matrix.i }}", "{{ out.o }}"]\n'
                '[params]\nblob = { type = "string" }\n[outputs]\no = "o.txt"\n')
    L.append(f'[stages.m]\nuses = "big"\nmatrix = {{ i = [{vals}] }}\n'
             f'with = {{ blob = "{"x" * param_bytes}" }}\n')
else:
    if shape == "select":
        L.append(f'[stages.m]\nmatrix = {{ i = [{vals}], j = [0, 1] }}\ninputs = {{ src = {{ path = "src.txt" }} }}\n'
                 'run = "echo {{ matrix.i }} {{ matrix.j }} > {{ out.o }}"\noutputs = { o = "o.txt" }\n')
    else:
        L.append(f'[stages.m]\nmatrix = {{ i = [{vals}] }}\ninputs = {{ src = {{ path = "src.txt" }} }}\n'
                 'run = "echo {{ matrix.i }} > {{ out.o }}"\noutputs = { o = "o.txt" }\n')
    if shape in ("map", "select"):
        sel = "m.o" if shape == "map" else "m[j=1].o"
        L.append(f'[stages.d]\ninputs = {{ x = "{sel}" }}\nrun = "cat {{{{ in.x }}}} > {{{{ out.o }}}}"\n'
                 'outputs = { o = "o.txt" }\n')
        L.append(gather.format(up="d"))
    else:
        L.append(gather.format(up="m"))
with open(os.path.join(out, "p.toml"), "w") as f:
    f.write("\n".join(L))
