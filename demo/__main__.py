"""``python -m demo``: run gtbarrier's demo job."""

from demo.foundation import main

if __name__ == "__main__":
    raise SystemExit(main())
