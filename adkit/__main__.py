"""`python -m adkit demo`: the worked example. Owns: the command line only."""
import argparse
import sys

from . import _demo


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m adkit")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the worked example")
    demo.add_argument("--out-dir", default="adkit-demo",
                      help="the folder the demo writes its pictures into (made if missing; "
                      "default: adkit-demo)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo.run(args.out_dir)
    return 2


if __name__ == "__main__":
    sys.exit(main())
