"""Private set intersection (PSI) of the parties' id columns: rows aligned by the intersection only.

Before a vertical run (and before scoring new records) the parties must agree on *which* rows are
the same customers. Joining on an id column in the clear shows each side the other's customer list.
Here the label party's organisation (the coordinator, which holds the label party's ids) and every
party compute the intersection with Google's ECDH-PSI (``openmined-psi``), as declared protocol
messages over the transport the run uses (gRPC with mutual TLS in a deployment):

1. ``Setup`` — the party reads the id column of its own file (``PartyData(key)``) and draws a fresh
   ECDH key from its own entropy (the library's; never sent); the coordinator says how many ids it
   will query (``client_size``);
2. request ``setup_message`` — the party's ids, each hashed to the curve and raised to its key
   (``H(id)^a``), in random order: without ``a`` they are pseudorandom points;
3. request ``respond`` — the coordinator sends its ids blinded with its own key (``H(id)^b``, in its
   order); the party raises them to its key (``H(id)^{ab}``) and returns them. It refuses a query of
   more ids than ``client_size`` announced, or a second query in one setup;
4. the coordinator raises the party's setup points to ``b``, matches, and learns which of *its* ids
   the party holds; over all parties it keeps the common ids ``I``;
5. request ``align`` — the coordinator sends ``I`` (ids in ``I`` only) in the canonical order (sorted
   as strings: an order that is a function of ``I`` alone, so it carries nothing about either file's
   row order). The party checks that every id is its own and that the order is canonical (else it
   refuses and aligns nothing), and keeps, for this file, its rows of ``I`` in that order.

The vertical protocol then reads a party's block with ``PartyData(key, {"psi": True})``: the party
takes the ids from its own alignment (:func:`aligned_ids`), never from the coordinator.

What PSI reveals [threat model, semi-honest ECDH-PSI under DDH in the random-oracle model]:

- the coordinator (PSI client) learns, per party, which of its ids the party holds (so ``I``) and
  the party's set size; nothing about the party's other ids;
- a party (PSI server) learns the coordinator's set size (the number of blinded ids), then ``I`` in
  step 5 — the intersection, which every party of a vertical run must know to align its rows;
  nothing about the coordinator's ids outside ``I``;
- the intersection itself is not differentially private (membership of a record in ``I`` is
  revealed); the DP guarantees of the training run are about the aligned rows' features and labels.
- a malicious coordinator can put any ids in its query and so test membership of up to
  ``client_size`` ids of its choice (inherent to PSI with an output; the size is in the party's
  audit log). A party that is told an id it does not hold in step 5 refuses (it reveals nothing
  new: the coordinator learned the answer in step 4).

PSI is the only door to membership (what a party's runtime calls, :func:`setup_rows` and :class:`PsiGate`):

- a Setup names rows only through the intersection of a PSI run this party took part in: ``psi=True``
  (the party's own alignment), or ids that all lie in it; a Setup naming other ids as a subset is refused
  without saying which; a Setup that joins on ids in the clear (no ``subset``) must name exactly the party's
  ids (the refusal names none of them: one bit, "the sets differ", per Setup);
- one ``align`` per PSI query, whatever it answers (a refused align spends the query): the coordinator
  cannot probe ids it never queried one ``align`` at a time;
- the operator caps a query's size (``psi_max_query``) and the number of PSI runs per period
  (``psi_max_runs`` per ``psi_period`` seconds), both recorded with the party's policy in its audit log;
  what remains is the intersection of each run and both set sizes.

Ids are compared as strings (``str(id)`` of the value read from the CSV), so ``7`` in one file and
``7.0`` in another do not match: give both sides the same id format.
"""

