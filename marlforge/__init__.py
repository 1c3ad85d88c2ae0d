"""The composition root: the ``marlforge`` command, which puts the service's processes together
(the API, a worker, the laptop stack of both) from ``api``, ``workers``, ``core`` and ``client``.
Nothing imports this package; it imports them."""
