from autodist.cli import main

main()
