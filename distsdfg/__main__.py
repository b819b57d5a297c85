from .launch.cli import main

main()
