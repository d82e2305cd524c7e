"""WebShop's text mode in pure Python over its data files (see :mod:`envs.webshop.env`).

Modules: ``data`` (catalog, seeded prices, cached :class:`~envs.webshop.data.Shop`), ``search``
(Lucene-identical BM25), ``goals``, ``reward``, ``pages`` (text rendering), ``engine`` (one session),
``env`` (the Gymnasium env), ``prompts`` (verl-agent's templates) and ``expert`` (scripted buyer).
"""
