"""``dpadmm consensus --node FILE --node FILE …``: the user's own nodes, one file per node, kept as given.

Each node file is LIBSVM (``--data``'s format) or, ending in ``.csv``, a CSV with a header, the label column
``--label-column`` (default ``y``) and an optional id column ``--id-column`` (default ``id``, dropped) — the file a
``dpadmm party serve --data train=FILE`` node reads. Test rows: ``--test-node FILE`` once per node (same order;
each node's own model is then judged on its own test rows) or one pooled ``--test FILE``.
Every problem is one clear error naming the file and the fix (:class:`~dpadmm.exceptions.DataFileError` or
:class:`~dpadmm.exceptions.InvalidParameterError`: exit code 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..exceptions import DataFileError, InvalidParameterError


def _read_csv(path: Path, label_column: str, id_column: str):
    import numpy as np
    import pandas as pd

    def read(**kw):
        try:
            return pd.read_csv(path, **kw)
        except (ValueError, OSError) as exc:
            raise DataFileError(f"cannot read node file {path} as CSV ({str(exc).splitlines()[0]}); give a CSV with "
                                f"a header and the label column {label_column!r}.") from None

    header = list(read(nrows=0).columns)  # the header first: a wrong name is reported before a long read
    if label_column not in header:
        raise DataFileError(f"node file {path} has no label column {label_column!r} (its columns: "
                            f"{', '.join(map(str, header[:8]))}{', …' if len(header) > 8 else ''}); name it with "
                            "--label-column.")
    df = read()
    if df.shape[0] == 0:
        raise DataFileError(f"node file {path} holds no rows; give every node at least one row of each class.")
    feats = [c for c in df.columns if c not in (label_column, id_column)]
    bad = [c for c in feats if not pd.api.types.is_numeric_dtype(df[c])]
    if bad:
        raise DataFileError(f"node file {path}: column(s) {', '.join(map(str, bad[:5]))} are not numeric; encode them "
                            "as numbers (e.g. one 0/1 column per category) in every node file.")
    return df[feats].to_numpy(dtype=np.float64), df[label_column].to_numpy(), feats


def read_node_files(paths: Sequence[Path], *, label_column: str = "y", id_column: str = "id", role: str = "--node"):
    """``(Xs, ys, columns)``: one (X, y) per file in the given order (raw labels; ``columns`` the CSV feature
    names or None for LIBSVM). LIBSVM files are widened to the widest file (unwritten trailing zero columns)."""
    import numpy as np

    from ..workflows.consensus import load_data

    Xs, ys, names = [], [], None
    kinds = {Path(p).suffix.lower() == ".csv" for p in paths}
    if len(kinds) > 1:
        raise InvalidParameterError(f"{role}: give every node file in one format (all .csv or all LIBSVM).")
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise DataFileError(f"node file not found: {p}; give one existing file per {role}.")
        if p.suffix.lower() == ".csv":
            X, y, cols = _read_csv(p, label_column, id_column)
            if names is not None and cols != names:
                extra, missing = sorted(set(cols) - set(names)), sorted(set(names) - set(cols))
                what = (f"extra {extra}, missing {missing}" if extra or missing else "the same columns in another order")
                raise InvalidParameterError(f"node file {p} has other feature columns than {Path(paths[0])} ({what}); "
                                            "give every node file the same columns in the same order.")
            names = cols
        else:
            X, y = load_data(str(p))
        Xs.append(np.asarray(X, dtype=np.float64))
        ys.append(np.asarray(y).ravel())
    if names is None:  # LIBSVM: trailing all-zero columns are not written
        d = max(x.shape[1] for x in Xs)
        Xs = [np.hstack([x, np.zeros((x.shape[0], d - x.shape[1]))]) if x.shape[1] < d else x for x in Xs]
    return Xs, ys, names


def load_nodes(node: Sequence[Path], test_node: Sequence[Path], test, *, label_column: str, id_column: str,
               nodes, data, split: str, test_fraction: float, target: str | None = None):
    """The node files and their test rows: ``(Xs, ys, X_test, y_test, node_tests)`` — ``node_tests`` one
    ``(X, y)`` per node with ``--test-node``, else None; ``X_test``/``y_test`` the pooled test rows (the
    ``--test-node`` files concatenated, or ``--test``), or None."""
    import numpy as np

    if len(node) < 2:
        raise InvalidParameterError("give at least two node files (--node FILE, repeat once per node).")
    if data is not None:
        raise InvalidParameterError("give --data FILE (split at random into --nodes) or --node FILE per node, not both.")
    if nodes is not None and nodes != len(node):
        raise InvalidParameterError(f"--nodes {nodes} but {len(node)} --node files: drop --nodes (one node per file).")
    if split != "even":
        raise InvalidParameterError("--split splits --data at random; with --node files the nodes are kept as given: "
                                    "drop --split.")
    if test_fraction > 0:
        raise InvalidParameterError("--test-fraction splits --data; with --node files give --test-node FILE per node "
                                    "or one pooled --test FILE.")
    if test_node and test is not None:
        raise InvalidParameterError("give --test-node FILE per node or one pooled --test FILE, not both.")
    if test_node and len(test_node) != len(node):
        raise InvalidParameterError(f"{len(test_node)} --test-node file(s) for {len(node)} --node files: give one "
                                    "test file per node, in the same order (or one pooled --test FILE).")
    Xs, ys, cols = read_node_files(node, label_column=label_column, id_column=id_column)
    # the labels' domain is checked by cli._consensus_targets.resolve, label by label (no class counted: red team T3)
    node_tests = X_test = y_test = None
    tests = list(test_node) if test_node else ([test] if test is not None else [])
    if tests:
        Xt, yt, tcols = read_node_files(tests, label_column=label_column, id_column=id_column,
                                        role="--test-node" if test_node else "--test")
        if (cols is None) != (tcols is None) or (cols is not None and tcols != cols):
            raise InvalidParameterError("the test file(s) must have the node files' format and feature columns "
                                        "(the same CSV header, or LIBSVM for LIBSVM).")
        d = Xs[0].shape[1]
        for p, x in zip(tests, Xt):
            if x.shape[1] > d:
                raise InvalidParameterError(f"test file {p} has {x.shape[1]} features but the node files {d}; use "
                                            "the same feature columns.")
        Xt = [np.hstack([x, np.zeros((x.shape[0], d - x.shape[1]))]) if x.shape[1] < d else x for x in Xt]
        X_test, y_test = np.concatenate(Xt), np.concatenate(yt)
        if test_node:
            node_tests = list(zip(Xt, yt))
    return Xs, ys, X_test, y_test, node_tests


def remote_nodes(backend, key: str = "train") -> list:
    """Over gRPC, each node's own file: one :class:`~dpadmm.protocol.PartyData` reference per ``--peer`` (in
    ``--peer`` order, named node0, node1, …), shaped by the rows and columns the node reports in its Hello (its
    size is public in the gossip protocol: the step is scaled by N/n). The nodes read their files themselves."""
    from ..protocol import PartyData

    names = list(backend.peers)
    expected = [f"node{i}" for i in range(len(names))]
    if names != expected:
        raise InvalidParameterError(f"nodes reading their own files must be --peer node0=…, node1=…, … in order; got "
                                    f"{', '.join(names)}.")
    if len(names) < 2:
        raise InvalidParameterError("give at least two nodes (--peer node0=HOST:PORT --peer node1=HOST:PORT …).")
    info = backend.hello(names)
    refs, cols = [], set()
    for nm in names:
        facts = (info[nm].get("data") or {}).get(key)
        if facts is None:
            raise InvalidParameterError(f"node {nm!r} was started without its own file; restart it with "
                                        f"`dpadmm party serve --data {key}=FILE`.")
        cols.add(int(facts["columns"]))
        refs.append(PartyData(key, {"part": "X"}, (int(facts["rows"]), int(facts["columns"]))))
    if len(cols) > 1:
        raise InvalidParameterError(f"the nodes' files have different column counts ({sorted(cols)}); give every node "
                                    "a file with the same feature columns.")
    return refs


def remote_test(test, d: int):
    """``(X_test, y_test)`` of a pooled ``--test`` FILE (LIBSVM or CSV) for nodes that read their own files, or
    ``(None, None)``."""
    if test is None:
        return None, None
    import numpy as np

    (X,), (y,), _ = read_node_files([test], role="--test")
    if X.shape[1] > d:
        raise InvalidParameterError(f"test file {test} has {X.shape[1]} features but the nodes {d}; use the same "
                                    "feature columns.")
    return np.hstack([X, np.zeros((X.shape[0], d - X.shape[1]))]) if X.shape[1] < d else X, y


def node_source(graph, files, tests, backend: str, target: str | None = None):
    """``(node_data, data, nodes, test)`` of a gossip run: ``"own-files"`` (grpc nodes read their own files), the
    ``--node`` files as given (:func:`load_nodes`), or None (``--data`` split at random into ``--nodes``)."""
    data, nodes, test = graph.data, graph.nodes, tests.test
    if files.own_files:
        if backend != "grpc":
            raise InvalidParameterError("--own-files: nodes started with `dpadmm party serve --data train=FILE` each "
                                        "read their own file; give --backend grpc --peer node0=… ….")
        if files.node or files.test_node or data is not None or nodes is not None or tests.test_fraction > 0:
            raise InvalidParameterError("--own-files: the nodes read their own files; drop --node/--test-node/--data/"
                                        "--nodes/--test-fraction (a pooled --test FILE is allowed).")
        return "own-files", "each node's own file", nodes, test
    if files.node or files.test_node:
        if not files.node:
            raise InvalidParameterError("--test-node needs the nodes' training files: --node FILE once per node.")
        node_data = load_nodes(files.node, files.test_node, test, label_column=files.label_column,
                               id_column=files.id_column, nodes=nodes, data=data, split=graph.split,
                               test_fraction=tests.test_fraction, target=target)
        return node_data, ",".join(str(p) for p in files.node), len(files.node), None
    return None, "adult" if data is None else data, 5 if nodes is None else nodes, test
