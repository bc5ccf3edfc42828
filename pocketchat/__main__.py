from pocketchat.cli import main

raise SystemExit(main())
