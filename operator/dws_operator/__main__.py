from dws_operator.cli import main

raise SystemExit(main())
