"""What only the book's pages use: code shown on a page (``source``), ipywidgets (``widgets``), the
published model stepped through (``stepthrough``), its embedding map (``embedding_map``) and the
figures a run copies into the book (``book_results``). The charts are ``aiayn.viz``.
"""
