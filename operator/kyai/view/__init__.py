"""``kyai view`` and ``kyai report``: runs, intervals, ranks, paired comparisons in a web page.

- :mod:`kyai.view.sources` reads what is shown: run directories, or a cluster's
  EvaluationRuns (and an EvaluationSweep) with their files where they are reachable, and the
  notices that say what could not be read;
- :mod:`kyai.view.payload` turns them into the page's data: the leaderboard's boards
  (:func:`kyai.ranking.rank`), every ordered pair of runs of one comparison key compared as
  ``kyai compare`` compares them (:func:`kyai.stats.compare`), the questions of each run;
- :mod:`kyai.view.page` writes the page (the data as JSON, rendered in the browser with
  Plotly's JavaScript as the ``plotly`` package ships it); :mod:`kyai.view.server` serves it;
- :mod:`kyai.view.cli` is the two commands' parser and handlers.

An optional extra of the command line (``pip install 'kyai-operator[view]'``), never in the
operator's image.
"""
